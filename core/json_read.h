// Reading files a user hands us (config.json, safetensors headers, index files, manifests)
// without trusting them: a FIFO or device is refused instead of blocking forever, nesting is
// bounded so nothing later recurses without limit, and every JSON failure becomes one e3::Error
// of the caller's kind that names the file and the key nearest the fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/error.h"

namespace e3 {

// Real configs, headers and manifests nest a handful of levels; this leaves ample room while
// keeping every recursive walk of a parsed document (dump, copy, compare) shallow.
inline constexpr int kMaxJsonDepth = 64;

// An open, read-only descriptor of a regular file (symlinks followed), move-only. Opening does
// not block on a FIFO: it is refused, as are directories and devices, with an error of `kind`:
// "<prefix>cannot read PATH: why<hint>".
class RegularFile {
 public:
  RegularFile(const std::filesystem::path& path, ErrorKind kind, std::string_view prefix = "",
              std::string_view hint = "");
  ~RegularFile();
  RegularFile(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  RegularFile& operator=(RegularFile&&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  // The whole content; an error of `kind` naming the file if reading fails.
  std::string read_all(const std::filesystem::path& path, ErrorKind kind) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Parses `text`. Any failure (syntax, a number out of range such as 1e400, nesting deeper than
// kMaxJsonDepth) is an error of `kind`: "WHERE: LABEL at key 'a.b[2]': what" (the key part
// when one is known), with the library's message cut short.
nlohmann::json parse_json(std::string_view text, ErrorKind kind, const std::string& where,
                          std::string_view label = "invalid JSON");

// The JSON document in `path`. A file that cannot be opened or is not a regular file is
// "<prefix>cannot read PATH: why<hint>"; a bad document is as parse_json says.
nlohmann::json read_json_file(const std::filesystem::path& path, ErrorKind kind, std::string_view prefix = "",
                              std::string_view hint = "");

// True for a bare file name: not empty, no '/', not "." or "..", no NUL. Names read from a file
// (an index's shards, a manifest's shards) must be this, so that they stay inside the directory
// they are joined to, whatever the file says.
bool is_plain_file_name(std::string_view name);

// `text` cut to at most `max_chars` bytes on a UTF-8 character boundary, with "... (N bytes)"
// marking the cut, and made printable (core/error.h), for messages that quote user input.
std::string clip(std::string_view text, size_t max_chars = 120);

// A JSON value as quoted in an error message: its text, clipped.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 64);

}  // namespace e3
