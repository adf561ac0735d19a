#include "io/tokenizer/normalized.h"

#include <algorithm>
#include <cstddef>

#include "io/tokenizer/unicode.h"

namespace e3::tok {

Span Normalized::byte_span(size_t i) const {
  if (!align_.empty()) return align_[i];
  size_t b = i;
  while (b > 0 && is_continuation(static_cast<unsigned char>(text_[b]))) --b;
  const size_t e = b + utf8_length(static_cast<unsigned char>(text_[b]));
  return {shift_ + static_cast<uint32_t>(b), shift_ + static_cast<uint32_t>(e)};
}

Span Normalized::original_of(size_t b, size_t e) const { return {byte_span(b).first, byte_span(e - 1).second}; }

Normalized Normalized::slice(size_t b, size_t e) const {
  Normalized part;
  part.text_ = text_.substr(b, e - b);
  if (align_.empty()) {
    part.shift_ = shift_ + static_cast<uint32_t>(b);
    part.original_ = {part.shift_, part.shift_ + static_cast<uint32_t>(e - b)};
  } else {
    part.align_.assign(align_.begin() + static_cast<std::ptrdiff_t>(b), align_.begin() + static_cast<std::ptrdiff_t>(e));
    part.original_ = b < e ? Span{align_[b].first, align_[e - 1].second} : Span{original_.first, original_.first};
  }
  return part;
}

void Normalized::materialize() {
  if (!align_.empty() || text_.empty()) return;
  align_.resize(text_.size());
  for (size_t i = 0; i < text_.size();) {
    const size_t len = utf8_length(static_cast<unsigned char>(text_[i]));
    const Span s{shift_ + static_cast<uint32_t>(i), shift_ + static_cast<uint32_t>(i + len)};
    for (size_t k = 0; k < len; ++k) align_[i + k] = s;
    i += len;
  }
}

void Normalized::map_chars(const std::function<void(char32_t, std::u32string&)>& emit) {
  materialize();
  std::string text;
  std::vector<Span> align;
  text.reserve(text_.size());
  align.reserve(text_.size());
  std::u32string chars;
  for (size_t i = 0; i < text_.size();) {
    size_t len = 0;
    const char32_t c = decode_utf8(text_, i, &len);
    chars.clear();
    emit(c, chars);
    for (char32_t d : chars) {
      const size_t before = text.size();
      append_utf8(text, d);
      align.insert(align.end(), text.size() - before, align_[i]);
    }
    i += len;
  }
  text_ = std::move(text);
  align_ = std::move(align);
}

void Normalized::replace_ranges(const std::vector<std::pair<size_t, size_t>>& ranges, std::string_view replacement) {
  if (ranges.empty()) return;
  materialize();
  std::string text;
  std::vector<Span> align;
  size_t last = 0;
  for (auto [b, e] : ranges) {
    text.append(text_, last, b - last);
    align.insert(align.end(), align_.begin() + static_cast<std::ptrdiff_t>(last), align_.begin() + static_cast<std::ptrdiff_t>(b));
    const Span s = e > b ? align_[e - 1] : (b > 0 ? align_[b - 1] : Span{0, 0});
    text.append(replacement);
    align.insert(align.end(), replacement.size(), s);
    last = e;
  }
  text.append(text_, last, std::string::npos);
  align.insert(align.end(), align_.begin() + static_cast<std::ptrdiff_t>(last), align_.end());
  text_ = std::move(text);
  align_ = std::move(align);
}

void Normalized::prepend(std::string_view s) {
  if (text_.empty() || s.empty()) return;
  materialize();
  const Span first = align_[0];
  text_.insert(0, s);
  align_.insert(align_.begin(), s.size(), first);
}

void Normalized::strip(bool left, bool right, const std::function<bool(char32_t)>& drop) {
  size_t b = 0, e = text_.size();
  while (left && b < e) {
    size_t len = 0;
    if (!drop(decode_utf8(text_, b, &len))) break;
    b += len;
  }
  while (right && e > b) {
    size_t s = e - 1;
    while (s > b && is_continuation(static_cast<unsigned char>(text_[s]))) --s;
    size_t len = 0;
    if (!drop(decode_utf8(text_, s, &len))) break;
    e = s;
  }
  if (b == 0 && e == text_.size()) return;
  // Kept characters keep their own ranges; the piece still covers the same original text.
  text_ = text_.substr(b, e - b);
  if (align_.empty()) {
    shift_ += static_cast<uint32_t>(b);
  } else {
    align_ = std::vector<Span>(align_.begin() + static_cast<std::ptrdiff_t>(b), align_.begin() + static_cast<std::ptrdiff_t>(e));
  }
}

void Normalized::replace_segment(size_t b, size_t e, const std::u32string& chars) {
  materialize();
  std::vector<Span> old_spans;
  for (size_t i = b; i < e;) {
    old_spans.push_back(align_[i]);
    i += utf8_length(static_cast<unsigned char>(text_[i]));
  }
  std::string text;
  std::vector<Span> align;
  for (size_t k = 0; k < chars.size(); ++k) {
    const size_t before = text.size();
    append_utf8(text, chars[k]);
    const Span s = old_spans.empty() ? Span{0, 0} : old_spans[std::min(k, old_spans.size() - 1)];
    align.insert(align.end(), text.size() - before, s);
  }
  text_.replace(b, e - b, text);
  align_.erase(align_.begin() + static_cast<std::ptrdiff_t>(b), align_.begin() + static_cast<std::ptrdiff_t>(e));
  align_.insert(align_.begin() + static_cast<std::ptrdiff_t>(b), align.begin(), align.end());
}

void Normalized::split(const std::vector<PatternSplit>& cover, SplitBehavior behavior,
                       std::vector<Normalized>& out) const {
  std::vector<std::pair<size_t, size_t>> parts;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const auto& c : cover) parts.emplace_back(c.begin, c.end);
      break;
    case SplitBehavior::Removed:
      for (const auto& c : cover)
        if (!c.match) parts.emplace_back(c.begin, c.end);
      break;
    case SplitBehavior::Contiguous:
      for (const auto& c : cover) {
        if (c.match == previous_match && !parts.empty()) {
          parts.back().second = c.end;
        } else {
          parts.emplace_back(c.begin, c.end);
        }
        previous_match = c.match;
      }
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const auto& c : cover) {
        if (c.match && !previous_match && !parts.empty()) {
          parts.back().second = c.end;
        } else {
          parts.emplace_back(c.begin, c.end);
        }
        previous_match = c.match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = cover.rbegin(); it != cover.rend(); ++it) {
        if (it->match && !previous_match && !parts.empty()) {
          parts.back().first = it->begin;
        } else {
          parts.emplace_back(it->begin, it->end);
        }
        previous_match = it->match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
  }
  for (auto [b, e] : parts)
    if (e > b) out.push_back(slice(b, e));
}

std::vector<PatternSplit> cover_by_chars(std::string_view text, const std::function<bool(char32_t)>& is_match) {
  std::vector<PatternSplit> cover;
  size_t last = 0;
  for (size_t i = 0; i < text.size();) {
    size_t len = 0;
    const char32_t c = decode_utf8(text, i, &len);
    if (is_match(c)) {
      if (last < i) cover.push_back({last, i, false});
      cover.push_back({i, i + len, true});
      last = i + len;
    }
    i += len;
  }
  if (last < text.size()) cover.push_back({last, text.size(), false});
  return cover;
}

std::vector<PatternSplit> cover_by_matches(size_t size, const std::vector<std::pair<size_t, size_t>>& matches,
                                           bool invert) {
  std::vector<PatternSplit> cover;
  size_t prev = 0;
  for (auto [s, e] : matches) {
    if (prev != s) cover.push_back({prev, s, invert});
    cover.push_back({s, e, !invert});
    prev = e;
  }
  if (prev != size) cover.push_back({prev, size, invert});
  return cover;
}

}  // namespace e3::tok
