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

// Appends the UTF-8 bytes of code point `c` (a scalar value: the caller's to check).
void append_utf8(std::string& out, char32_t c);

}  // namespace e3
