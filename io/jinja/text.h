// Strings that remember where their bytes came from: a tag per byte range, carried through every
// string operation the interpreter performs, and the few Unicode facts Python's str methods need
// (code points, whitespace, line breaks, simple case mapping).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"

namespace e3::jinja::detail {

struct TagRun {
  uint32_t begin, end;
  int32_t tag;
};

class Text {
 public:
  Text() = default;
  explicit Text(std::string s, int32_t tag = 0);

  const std::string& str() const { return s_; }
  const std::vector<TagRun>& runs() const { return runs_; }
  size_t size() const { return s_.size(); }
  bool empty() const { return s_.empty(); }

  void append(std::string_view plain, int32_t tag = 0);
  void append(const Text& other);
  // Bytes [begin, end) of `other`, with their tags.
  void append(const Text& other, size_t begin, size_t end);
  Text slice(size_t begin, size_t end) const;
  int32_t tag_at(size_t byte) const;
  void reserve(size_t n) { s_.reserve(n); }

 private:
  void add_run(uint32_t begin, uint32_t end, int32_t tag);
  std::string s_;
  std::vector<TagRun> runs_;  // sorted, non-overlapping, tag != 0, adjacent equal tags merged
};

// UTF-8: the code point at byte i and its length (an invalid byte reads as itself, length 1, so
// that every operation still works on the bytes it was given).
uint32_t decode_at(std::string_view s, size_t i, size_t* len);
using e3::append_utf8;  // core/utf8.h
size_t count_code_points(std::string_view s);
// Byte offsets of each code point start, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);

bool is_space(uint32_t cp);       // Python's str.isspace
bool is_line_break(uint32_t cp);  // what str.splitlines splits on (\r\n counts once)
bool is_alpha(uint32_t cp);       // letters: ASCII and the scripts case mapping knows, and CJK/other non-ASCII letters
bool is_digit(uint32_t cp);
bool is_upper(uint32_t cp);
bool is_lower(uint32_t cp);
// Simple case mapping (ASCII, Latin-1, Latin Extended-A/Additional, Greek, Cyrillic, Armenian,
// fullwidth); 'ß'.upper() is "SS" as in Python. Appends the mapping of `cp`.
void append_upper(std::string& out, uint32_t cp);
void append_lower(std::string& out, uint32_t cp);

}  // namespace e3::jinja::detail
