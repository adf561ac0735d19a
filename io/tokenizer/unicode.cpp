#include "io/tokenizer/unicode.h"

// ICU and Oniguruma both name a type UChar; Oniguruma keeps its own name here.
#define ONIG_ESCAPE_UCHAR_COLLISION
#include <oniguruma.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <mutex>
#include <vector>

#include "core/error.h"
#include "io/tokenizer/regex.h"

namespace e3::tok {

namespace {

// Oniguruma's property ctypes, looked up by name once.
struct PropertyTable {
  int white_space, number, punct, mark, alphabetic, nd, pc, join_control;
  PropertyTable() {
    ensure_oniguruma();
    auto ctype = [](const char* name) {
      auto* p = reinterpret_cast<OnigUChar*>(const_cast<char*>(name));
      const int t = ONIGENC_PROPERTY_NAME_TO_CTYPE(ONIG_ENCODING_UTF8, p, p + std::char_traits<char>::length(name));
      E3_REQUIRE(t >= 0, ErrorKind::Internal, "Oniguruma has no Unicode property {}", name);
      return t;
    };
    white_space = ctype("White_Space");
    number = ctype("N");
    punct = ctype("P");
    mark = ctype("M");
    alphabetic = ctype("Alphabetic");
    nd = ctype("Nd");
    pc = ctype("Pc");
    join_control = ctype("Join_Control");
  }
};

const PropertyTable& properties() {
  static const PropertyTable table;  // immutable once built (thread-safe static init)
  return table;
}

bool is_ctype(char32_t c, int ctype) {
  return ONIGENC_IS_CODE_CTYPE(ONIG_ENCODING_UTF8, static_cast<OnigCodePoint>(c), static_cast<unsigned>(ctype)) != 0;
}

const UNormalizer2* normalizer_of(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (form) {
    case NormalForm::NFC: n = unorm2_getNFCInstance(&status); break;
    case NormalForm::NFD: n = unorm2_getNFDInstance(&status); break;
    case NormalForm::NFKC: n = unorm2_getNFKCInstance(&status); break;
    case NormalForm::NFKD: n = unorm2_getNFKDInstance(&status); break;
  }
  E3_REQUIRE(U_SUCCESS(status) && n, ErrorKind::Internal, "ICU normalizer unavailable: {}", u_errorName(status));
  return n;
}

}  // namespace

bool has_property(char32_t c, Property p) {
  if (c < 0x80) {  // the hot cases, without a table call
    switch (p) {
      case Property::WhiteSpace: return c == ' ' || (c >= 0x09 && c <= 0x0D);
      case Property::Numeric: return c >= '0' && c <= '9';
      case Property::Word:
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
      default: break;
    }
  }
  const PropertyTable& t = properties();
  switch (p) {
    case Property::WhiteSpace: return is_ctype(c, t.white_space);
    case Property::Numeric: return is_ctype(c, t.number);
    case Property::Punctuation: return is_ctype(c, t.punct) || (c < 0x80 && std::ispunct(static_cast<int>(c)));
    case Property::Mark: return is_ctype(c, t.mark);
    case Property::Word:
      return is_ctype(c, t.alphabetic) || is_ctype(c, t.mark) || is_ctype(c, t.nd) || is_ctype(c, t.pc) ||
             is_ctype(c, t.join_control);
  }
  return false;
}

namespace {

void to_utf16(std::string_view text, std::vector<UChar>& out) {
  out.resize(text.size() + 1);
  int32_t len = 0;
  UErrorCode status = U_ZERO_ERROR;
  u_strFromUTF8(out.data(), static_cast<int32_t>(out.size()), &len, text.data(), static_cast<int32_t>(text.size()),
                &status);
  E3_REQUIRE(U_SUCCESS(status), ErrorKind::Internal, "ICU UTF-8 conversion failed: {}", u_errorName(status));
  out.resize(static_cast<size_t>(len));
}

bool is_normalized(const UNormalizer2* n, const std::vector<UChar>& s) {
  UErrorCode status = U_ZERO_ERROR;
  const bool yes = unorm2_isNormalized(n, s.data(), static_cast<int32_t>(s.size()), &status);
  return U_SUCCESS(status) && yes;
}

std::u32string normalized_code_points(const UNormalizer2* n, const std::vector<UChar>& s) {
  std::vector<UChar> dst(s.size() * 4 + 16);
  UErrorCode status = U_ZERO_ERROR;
  int32_t len = unorm2_normalize(n, s.data(), static_cast<int32_t>(s.size()), dst.data(),
                                 static_cast<int32_t>(dst.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) {
    status = U_ZERO_ERROR;
    dst.resize(static_cast<size_t>(len) + 1);
    len = unorm2_normalize(n, s.data(), static_cast<int32_t>(s.size()), dst.data(), static_cast<int32_t>(dst.size()),
                           &status);
  }
  E3_REQUIRE(U_SUCCESS(status), ErrorKind::Internal, "ICU normalization failed: {}", u_errorName(status));
  std::u32string out;
  for (int32_t i = 0; i < len;) {
    UChar32 c;
    U16_NEXT(dst.data(), i, len, c);
    out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

}  // namespace

std::vector<ChangedSegment> normalize_segments(std::string_view text, NormalForm form) {
  std::vector<ChangedSegment> changed;
  bool ascii = true;
  for (char ch : text) ascii &= static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return changed;  // every form leaves ASCII as it is
  const UNormalizer2* n = normalizer_of(form);
  std::vector<UChar> utf16;
  to_utf16(text, utf16);
  if (is_normalized(n, utf16)) return changed;
  // Segments start where a code point has a boundary before it: each normalizes on its own, so
  // the changes can be placed (and their offsets aligned) segment by segment.
  auto flush = [&](size_t begin, size_t end) {
    bool plain = true;  // a segment of ASCII alone is in every form
    for (size_t k = begin; k < end && plain; ++k) plain = static_cast<unsigned char>(text[k]) < 0x80;
    if (plain) return;
    to_utf16(text.substr(begin, end - begin), utf16);
    if (!is_normalized(n, utf16)) changed.push_back({begin, end, normalized_code_points(n, utf16)});
  };
  size_t seg_begin = 0;
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const char32_t c = decode_utf8(text, i, &len);
    if (i > seg_begin && unorm2_hasBoundaryBefore(n, static_cast<UChar32>(c))) {
      flush(seg_begin, i);
      seg_begin = i;
    }
    i += len;
  }
  flush(seg_begin, text.size());
  return changed;
}

void lowercase_into(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  UChar src[2];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, static_cast<UChar32>(c));
  UChar dst[8];
  UErrorCode status = U_ZERO_ERROR;
  // One code point at a time: no context, so the mapping is the unconditional one Rust uses.
  const int32_t n = u_strToLower(dst, 8, src, src_len, "", &status);
  if (U_FAILURE(status)) {
    out.push_back(c);
    return;
  }
  for (int32_t i = 0; i < n;) {
    UChar32 d;
    U16_NEXT(dst, i, n, d);
    out.push_back(static_cast<char32_t>(d));
  }
}

}  // namespace e3::tok
