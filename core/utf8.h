// UTF-8 for every library that handles text: the chat templates, the tokenizer, the exporters'
// pickled strings. One definition of what "valid" means (no overlong forms, no surrogates, nothing
// past U+10FFFF), as Python's and HF's decoders hold it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace e3 {

// True when `text` is well-formed UTF-8. Otherwise *bad_offset (when given) is the offset of the
// first byte of the first bad sequence.
bool valid_utf8(std::string_view text, size_t* bad_offset = nullptr);

// The length (2 to 4) of the well-formed multi-byte sequence starting at text[i], with its code
// point in `c`; 0 when the bytes there are not one (an ASCII byte, a stray continuation byte, a
// truncated, overlong or surrogate sequence, or one past U+10FFFF).
size_t decode_utf8_sequence(std::string_view text, size_t i, char32_t& c);

// Appends the UTF-8 bytes of code point `c` (a scalar value: the caller's to check).
void append_utf8(std::string& out, char32_t c);

}  // namespace e3
