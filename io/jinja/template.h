// A Jinja2 interpreter for chat templates, rendering as HF transformers does (Python jinja2's
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop controls, {% generation %},
// raise_exception, strftime_now and HF's tojson), and knowing which output bytes came from which
// tagged part of the input: the loss mask is computed from those spans, never from token ids.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace e3::jinja {

// Rendered bytes [begin, end) came from the input string(s) carrying `tag`.
struct Origin {
  size_t begin = 0, end = 0;
  int32_t tag = 0;
  bool operator==(const Origin&) const = default;
};

struct Rendered {
  std::string text;
  std::vector<Origin> origins;                        // sorted, non-overlapping, adjacent equal tags merged
  std::vector<std::pair<size_t, size_t>> generation;  // [begin, end) of each {% generation %} block
};

struct RenderOptions {
  std::chrono::system_clock::time_point now{};  // what strftime_now formats (in local time, as HF does)
  // A hostile template must end with a clear error, not exhaust the machine: no string or output
  // may grow past max_output_bytes, and the work of one render (loop iterations, calls, items of
  // sequences walked or copied) is counted against max_steps. Nesting and recursion end with an
  // error too (a render needs at most about 3 MiB of stack).
  size_t max_output_bytes = size_t{64} << 20;
  uint64_t max_steps = 20'000'000;
};

namespace detail {
struct Program;
}

class Template {
 public:
  // Parses the whole template; a syntax error throws e3::Error(ErrorKind::Input) whose message is
  // "NAME:LINE:COL: what" (NAME = the template's file name or "chat_template of DIR").
  static Template parse(std::string_view source, std::string name);

  // `context`: the variables (messages, tools, bos_token, eos_token, add_generation_prompt, ...);
  // an ordered_json, because HF's tojson writes keys in the order the input gave them.
  // `tags`: JSON pointers into context ("/messages/3/content", "/messages/3/tool_calls"); every
  // value inside that subtree carries the tag (an inner pointer's tag wins), and the provenance
  // follows strings through the template's string operations; a pointer to nothing tags nothing.
  // Runtime errors and raise_exception() throw e3::Error(ErrorKind::Input) "NAME:LINE: what".
  // Thread-safe (const).
  Rendered render(const nlohmann::ordered_json& context, const std::vector<std::pair<std::string, int32_t>>& tags,
                  const RenderOptions& options = {}) const;

  const std::string& name() const;

 private:
  explicit Template(std::shared_ptr<const detail::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const detail::Program> program_;
};

}  // namespace e3::jinja
