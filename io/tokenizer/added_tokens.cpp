#include "io/tokenizer/added_tokens.h"

#include <algorithm>

#include "io/tokenizer/unicode.h"

namespace e3::tok {

uint32_t AddedMatcher::child(uint32_t node, unsigned char b) const {
  if (node == 0) return root_next_[b];
  const auto& ch = nodes_[node].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, uint32_t(0)));
  return it != ch.end() && it->first == b ? it->second : 0;
}

void AddedMatcher::build(const std::vector<const AddedToken*>& tokens, const std::vector<std::string>& patterns) {
  tokens_ = tokens;
  nodes_.assign(1, Node{});
  std::fill(std::begin(root_next_), std::end(root_next_), 0u);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    uint32_t node = 0;
    for (char c : p) {
      const auto b = static_cast<unsigned char>(c);
      uint32_t next = child(node, b);
      if (next == 0) {
        next = static_cast<uint32_t>(nodes_.size());
        nodes_.push_back(Node{});
        if (node == 0) {
          root_next_[b] = next;
        } else {
          auto& ch = nodes_[node].children;
          ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, uint32_t(0))), {b, next});
        }
      }
      node = next;
    }
    nodes_[node].token = static_cast<int32_t>(t);  // a repeated pattern keeps the later token
  }
}

namespace {

bool is_space(char32_t c) { return has_property(c, Property::WhiteSpace); }
bool is_word(char32_t c) { return has_property(c, Property::Word); }

char32_t last_char(std::string_view s) {
  size_t b = s.size() - 1;
  while (b > 0 && is_continuation(static_cast<unsigned char>(s[b]))) --b;
  size_t len = 0;
  return decode_utf8(s, b, &len);
}

}  // namespace

void AddedMatcher::split(std::string_view text, std::vector<AddedSplit>& out) const {
  if (text.empty()) return;
  if (tokens_.empty()) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;
  size_t i = 0;
  while (i < text.size()) {
    // The longest pattern starting at i.
    uint32_t node = root_next_[static_cast<unsigned char>(text[i])];
    if (node == 0) {
      ++i;
      continue;
    }
    int32_t found = -1;
    size_t found_end = 0;
    for (size_t j = i + 1;; ++j) {
      if (nodes_[node].token >= 0) {
        found = nodes_[node].token;
        found_end = j;
      }
      if (j >= text.size()) break;
      node = child(node, static_cast<unsigned char>(text[j]));
      if (node == 0) break;
    }
    if (found < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = *tokens_[static_cast<size_t>(found)];
    size_t start = i, stop = found_end;
    i = found_end;  // matches never overlap, whether kept or not
    if (tok.single_word) {
      const bool space_before = start == 0 || !is_word(last_char(text.substr(0, start)));
      size_t len = 0;
      const bool space_after = stop == text.size() || !is_word(decode_utf8(text, stop, &len));
      if (!space_before || !space_after) continue;
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t b = s - 1;
        while (b > 0 && is_continuation(static_cast<unsigned char>(text[b]))) --b;
        size_t len = 0;
        if (!is_space(decode_utf8(text, b, &len))) break;
        s = b;
      }
      start = std::max(s, start_offset);
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        size_t len = 0;
        if (!is_space(decode_utf8(text, stop, &len))) break;
        stop += len;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, tok.id});
    start_offset = stop;
    i = std::max(i, stop);
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace e3::tok
