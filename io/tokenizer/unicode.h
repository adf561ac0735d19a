// UTF-8 stepping, the Unicode properties HF's components test (asked of Oniguruma's tables, the
// same ones its regexes use), and ICU's normalization forms and lowercase mapping.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"

namespace e3::tok {

// The code point starting at s[i] and its length in bytes; `s` is valid UTF-8.
inline char32_t decode_utf8(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *len = 2;
    return (char32_t(b0 & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F);
  }
  if (b0 < 0xF0) {
    *len = 3;
    return (char32_t(b0 & 0x0F) << 12) | (char32_t(static_cast<unsigned char>(s[i + 1]) & 0x3F) << 6) |
           (static_cast<unsigned char>(s[i + 2]) & 0x3F);
  }
  *len = 4;
  return (char32_t(b0 & 0x07) << 18) | (char32_t(static_cast<unsigned char>(s[i + 1]) & 0x3F) << 12) |
         (char32_t(static_cast<unsigned char>(s[i + 2]) & 0x3F) << 6) | (static_cast<unsigned char>(s[i + 3]) & 0x3F);
}

inline size_t utf8_length(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }
inline bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

using e3::append_utf8;  // core/utf8.h

// The properties Rust's char methods and HF's helpers test.
enum class Property { WhiteSpace, Numeric, Punctuation, Mark, Word };
bool has_property(char32_t c, Property p);  // Word: Rust regex's \w (Alphabetic, M, Nd, Pc, Join_Control)

enum class NormalForm { NFC, NFD, NFKC, NFKD };
// A stretch of text that normalizes on its own (it starts at a normalization boundary) and that
// the form changes: its bytes [begin, end) and its normalized code points.
struct ChangedSegment {
  size_t begin, end;
  std::u32string normalized;
};
// The segments of `text` that `form` changes, in order; empty when `text` is already in the form.
std::vector<ChangedSegment> normalize_segments(std::string_view text, NormalForm form);
// The full lowercase mapping of one code point (as Rust's char::to_lowercase), appended to `out`.
void lowercase_into(char32_t c, std::u32string& out);

}  // namespace e3::tok
