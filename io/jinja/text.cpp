#include "io/jinja/text.h"

#include <algorithm>

namespace e3::jinja::detail {

Text::Text(std::string s, int32_t tag) : s_(std::move(s)) {
  if (tag != 0 && !s_.empty()) runs_.push_back({0, static_cast<uint32_t>(s_.size()), tag});
}

void Text::add_run(uint32_t begin, uint32_t end, int32_t tag) {
  if (tag == 0 || begin >= end) return;
  if (!runs_.empty() && runs_.back().end == begin && runs_.back().tag == tag) {
    runs_.back().end = end;
    return;
  }
  runs_.push_back({begin, end, tag});
}

void Text::append(std::string_view plain, int32_t tag) {
  const auto begin = static_cast<uint32_t>(s_.size());
  s_.append(plain);
  add_run(begin, static_cast<uint32_t>(s_.size()), tag);
}

void Text::append(const Text& other) { append(other, 0, other.size()); }

void Text::append(const Text& other, size_t begin, size_t end) {
  if (begin >= end) return;
  const auto base = static_cast<uint32_t>(s_.size());
  s_.append(other.s_, begin, end - begin);
  // The first run that ends after `begin`.
  auto it = std::upper_bound(other.runs_.begin(), other.runs_.end(), begin,
                             [](size_t b, const TagRun& r) { return b < r.end; });
  for (; it != other.runs_.end() && it->begin < end; ++it) {
    const size_t b = std::max<size_t>(it->begin, begin), e = std::min<size_t>(it->end, end);
    add_run(base + static_cast<uint32_t>(b - begin), base + static_cast<uint32_t>(e - begin), it->tag);
  }
}

Text Text::slice(size_t begin, size_t end) const {
  Text out;
  out.append(*this, begin, std::min(end, s_.size()));
  return out;
}

int32_t Text::tag_at(size_t byte) const {
  auto it = std::upper_bound(runs_.begin(), runs_.end(), byte, [](size_t b, const TagRun& r) { return b < r.end; });
  return it != runs_.end() && it->begin <= byte ? it->tag : 0;
}

uint32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) {
    *len = 1;
    return c;
  } else if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07;
  } else {
    *len = 1;
    return c;
  }
  if (i + n > s.size()) {
    *len = 1;
    return c;
  }
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) {
      *len = 1;
      return c;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  *len = n;
  return cp;
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len, ++n) decode_at(s, i, &len);
  return n;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  size_t len = 0;
  for (size_t i = 0; i < s.size(); i += len) {
    out.push_back(i);
    decode_at(s, i, &len);
  }
  out.push_back(s.size());
  return out;
}

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_line_break(uint32_t cp) {
  return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
         cp == 0x2028 || cp == 0x2029;
}

namespace {

// The simple uppercase of cp, or cp. Pairs laid out as (upper, lower) alternating from `first`.
bool in_pairs(uint32_t cp, uint32_t first, uint32_t last) { return cp >= first && cp <= last; }

uint32_t to_upper(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp == 0xB5) return 0x39C;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp == 0x131) return 'I';
  if (in_pairs(cp, 0x100, 0x137) || in_pairs(cp, 0x14A, 0x177) || in_pairs(cp, 0x1E00, 0x1E95) ||
      in_pairs(cp, 0x1EA0, 0x1EFF) || in_pairs(cp, 0x460, 0x481) || in_pairs(cp, 0x48A, 0x4BF) ||
      in_pairs(cp, 0x4D0, 0x52F))
    return (cp % 2 == 1) ? cp - 1 : cp;
  if (in_pairs(cp, 0x139, 0x148) || in_pairs(cp, 0x179, 0x17E) || in_pairs(cp, 0x4C1, 0x4CE))
    return (cp % 2 == 0) ? cp - 1 : cp;
  if (cp == 0x17F) return 'S';
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;
  if (cp == 0x3AC) return 0x386;
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
  if (cp >= 0x3CA && cp <= 0x3CB) return cp - 32;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  if (cp >= 0x561 && cp <= 0x586) return cp - 48;
  if (cp >= 0xFF41 && cp <= 0xFF5A) return cp - 32;
  return cp;
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if ((cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (in_pairs(cp, 0x100, 0x137) || in_pairs(cp, 0x14A, 0x177) || in_pairs(cp, 0x1E00, 0x1E95) ||
      in_pairs(cp, 0x1EA0, 0x1EFF) || in_pairs(cp, 0x460, 0x481) || in_pairs(cp, 0x48A, 0x4BF) ||
      in_pairs(cp, 0x4D0, 0x52F))
    return (cp % 2 == 0) ? cp + 1 : cp;
  if (in_pairs(cp, 0x139, 0x148) || in_pairs(cp, 0x179, 0x17E) || in_pairs(cp, 0x4C1, 0x4CE))
    return (cp % 2 == 1) ? cp + 1 : cp;
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  if (cp >= 0x531 && cp <= 0x556) return cp + 48;
  if (cp >= 0xFF21 && cp <= 0xFF3A) return cp + 32;
  return cp;
}

}  // namespace

bool is_upper(uint32_t cp) { return to_lower(cp) != cp || cp == 0x130; }
bool is_lower(uint32_t cp) { return to_upper(cp) != cp || cp == 0xDF; }
bool is_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

bool is_alpha(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (is_upper(cp) || is_lower(cp)) return true;
  if (cp == 0xAA || cp == 0xBA) return true;
  // Scripts without case, where letters are most of the block: CJK, kana, Hangul, Arabic,
  // Hebrew, Devanagari... (an approximation: Python consults the whole Unicode database).
  return (cp >= 0x5D0 && cp <= 0x5EA) || (cp >= 0x620 && cp <= 0x64A) || (cp >= 0x904 && cp <= 0x939) ||
         (cp >= 0x3041 && cp <= 0x3096) || (cp >= 0x30A1 && cp <= 0x30FA) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
         (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xE01 && cp <= 0xE30);
}

void append_upper(std::string& out, uint32_t cp) {
  if (cp == 0xDF) {
    out += "SS";
    return;
  }
  append_utf8(out, to_upper(cp));
}

void append_lower(std::string& out, uint32_t cp) {
  if (cp == 0x130) {
    out += "i\xCC\x87";  // İ lowers to i + combining dot above, as in Python
    return;
  }
  append_utf8(out, to_lower(cp));
}

}  // namespace e3::jinja::detail
