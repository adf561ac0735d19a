#include "jobs/run_config.h"

#include <algorithm>
#include <charconv>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"

namespace e3::jobs {

std::vector<int> parse_capture_ids(const std::string& text) {
  E3_REQUIRE(!text.empty(), ErrorKind::Usage,
             "--layers is empty; give comma-separated capture ids such as 2,16,29, or leave the option out for "
             "the default");
  std::vector<int> ids;
  size_t begin = 0;
  for (int item = 1;; ++item) {
    const size_t end = std::min(text.find(',', begin), text.size());
    std::string_view piece(text.data() + begin, end - begin);
    // "2, 16, 29" (spaces after the commas, as a person writes a list) is the same list.
    piece.remove_prefix(std::min(piece.size(), piece.find_first_not_of(' ')));
    piece.remove_suffix(piece.size() - std::min(piece.size(), piece.find_last_not_of(' ') + 1));
    E3_REQUIRE(!piece.empty(), ErrorKind::Usage, "--layers {}: item {} is empty", printable(text), item);
    int value = 0;
    const auto [ptr, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), value);
    E3_REQUIRE(ec == std::errc() && ptr == piece.data() + piece.size(), ErrorKind::Usage,
               "--layers {}: item {} ('{}') is not an integer", printable(text), item, printable(piece));
    ids.push_back(value);
    if (end == text.size()) return ids;
    begin = end + 1;
  }
}

uint64_t parse_byte_size(const std::string& text, const char* option) {
  uint64_t value = 0;
  const char* const end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  const auto refuse = [&] {
    E3_THROW(ErrorKind::Usage,
             "{} '{}': expected a positive whole number of bytes, optionally with a suffix K, M or G (or KiB, MiB, "
             "GiB; powers of 1024), such as 4G or 512MiB",
             option, text);
  };
  if (ec != std::errc() || ptr == text.data() || value == 0) refuse();
  std::string suffix(ptr, end);
  if (suffix.size() == 3 && suffix.compare(1, 2, "iB") == 0) suffix.resize(1);
  int shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (!suffix.empty()) refuse();
  // Above 2^63 the byte counts it is compared with (int64 on the way) would overflow.
  if (value > (uint64_t{1} << (63 - shift))) refuse();
  return value << shift;
}

namespace {

// A test-only variable: "" or unset is nullopt; anything but a whole number >= 0 is refused.
std::optional<int64_t> env_index(const Environment& env, const char* name) {
  const std::optional<std::string> v = env.get(name);
  if (!v || v->empty()) return std::nullopt;
  int64_t value = -1;
  const auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), value);
  E3_REQUIRE(ec == std::errc() && ptr == v->data() + v->size() && value >= 0, ErrorKind::Usage,
             "{}='{}': expected a whole number >= 0", name, *v);
  return value;
}

}  // namespace

FaultInjection fault_injection_from(const Environment& env) {
  FaultInjection f;
  f.fail_at_sample = env_index(env, "E3_FAIL_AT_SAMPLE").value_or(-1);
  f.rank = static_cast<int>(env_index(env, "E3_FAIL_ON_RANK").value_or(0));
  f.fail_publish_shard = env_index(env, "E3_FAIL_PUBLISH_SHARD").value_or(-1);
  f.step_delay_ms = env_index(env, "E3_STEP_DELAY_MS").value_or(0);
  return f;
}

int writer_thread_count(int requested, int cores, int ranks_on_node, int tp) {
  if (requested > 0) return requested;
  const int writers = std::max(1, ranks_on_node / std::max(1, tp));
  return std::clamp(cores / writers, 1, 8);
}

std::optional<std::string> threads_warning(int threads, int ranks_on_node, int cores) {
  const int64_t wanted = static_cast<int64_t>(threads) * ranks_on_node;
  if (wanted <= cores) return std::nullopt;
  return fmt::format("--threads {} on each of the {} rank{} of this node is {} threads for {} cores: oversubscribed "
                     "threads wait on each other and run slower",
                     threads, ranks_on_node, ranks_on_node == 1 ? "" : "s", wanted, cores);
}

}  // namespace e3::jobs
