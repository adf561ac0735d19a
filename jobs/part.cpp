#include "jobs/part.h"

#include <fmt/format.h>

#include "core/error.h"

namespace e3::jobs {

namespace {

int64_t parse_int(const std::string& text, const std::string& what) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  E3_REQUIRE(used == text.size() && !text.empty(), ErrorKind::Usage, "{}: '{}' is not an integer", what, text);
  return v;
}

}  // namespace

io::Part parse_part(const std::string& text, const Environment& env) {
  io::Part p;
  if (text == "slurm") {
    auto need = [&](const char* name) {
      const auto v = env.get(name);
      E3_REQUIRE(v.has_value(), ErrorKind::Usage, "--part slurm: {} is not set (is this a Slurm array job?)", name);
      return parse_int(*v, fmt::format("--part slurm: {}", name));
    };
    const int64_t id = need("SLURM_ARRAY_TASK_ID"), min = need("SLURM_ARRAY_TASK_MIN"),
                  max = need("SLURM_ARRAY_TASK_MAX"), count = need("SLURM_ARRAY_TASK_COUNT");
    const auto step_text = env.get("SLURM_ARRAY_TASK_STEP");
    const int64_t step = step_text ? parse_int(*step_text, "--part slurm: SLURM_ARRAY_TASK_STEP") : 1;
    // Only a regular range (--array=0-7 or 1-16:2) maps task ids onto parts one to one.
    E3_REQUIRE(step > 0 && (max - min) % step == 0 && (max - min) / step + 1 == count && (id - min) % step == 0,
               ErrorKind::Usage,
               "--part slurm needs an array of evenly spaced task ids (like --array=0-7); this one has ids {}..{} step "
               "{} but {} tasks; give --part I/P instead",
               min, max, step, count);
    p.index = static_cast<int>((id - min) / step);
    p.count = static_cast<int>(count);
    return p;
  }
  const auto slash = text.find('/');
  E3_REQUIRE(slash != std::string::npos, ErrorKind::Usage, "--part '{}': expected I/P (e.g. 3/8) or 'slurm'", text);
  const int64_t index = parse_int(text.substr(0, slash), "--part index");
  const int64_t count = parse_int(text.substr(slash + 1), "--part count");
  E3_REQUIRE(count >= 1 && index >= 0 && index < count && count <= 1000000, ErrorKind::Usage,
             "--part {}: need 0 <= I < P", text);
  p.index = static_cast<int>(index);
  p.count = static_cast<int>(count);
  return p;
}

}  // namespace e3::jobs
