// HF's added vocabulary: the added and special tokens, found inside the text before anything else
// (leftmost, longest), with their single_word, lstrip and rstrip rules. Tokens with normalized =
// false are found in the original text; the others in each normalized stretch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace e3::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// A cover of the searched text: either an added token (id >= 0, its stripped whitespace
// included) or text between tokens (id = -1).
struct AddedSplit {
  size_t begin, end;
  int32_t id;
};

class AddedMatcher {
 public:
  // `patterns[i]` is what token `tokens[i]` is found as (its content, or its normalized form).
  void build(const std::vector<const AddedToken*>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }
  // Appends the cover of `text` (nothing for an empty text).
  void split(std::string_view text, std::vector<AddedSplit>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> children;  // sorted by byte
    int32_t token = -1;                                        // index into tokens_ when a pattern ends here
  };
  uint32_t child(uint32_t node, unsigned char b) const;
  std::vector<Node> nodes_;
  uint32_t root_next_[256] = {};  // the root's children by byte (0: none), for a fast first test
  std::vector<const AddedToken*> tokens_;
};

}  // namespace e3::tok
