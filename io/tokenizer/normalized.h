// A piece of the input on its way through the normalizers and pre-tokenizers: its current bytes
// and, for every byte, the range of the original input it came from, so that the tokens made of
// it can be given offsets into the original text (HF's NormalizedString). Untouched pieces carry
// no table: byte i came from the original character around `shift + i`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace e3::tok {

using Span = std::pair<uint32_t, uint32_t>;  // [begin, end) in the original input

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// A cover of a piece's bytes by consecutive ranges, each flagged a match of the split pattern.
struct PatternSplit {
  size_t begin, end;
  bool match;
};

class Normalized {
 public:
  Normalized() = default;
  // Bytes [begin, end) of `original`, untouched.
  Normalized(std::string_view original, uint32_t begin, uint32_t end)
      : text_(original.substr(begin, end - begin)), shift_(begin), original_(begin, end) {}

  const std::string& text() const { return text_; }
  bool empty() const { return text_.empty(); }
  bool untouched() const { return align_.empty(); }  // byte i came from original byte shift() + i
  uint32_t shift() const { return shift_; }
  // The original range this piece covers (HF's offsets_original).
  Span original() const { return original_; }
  // The original range of this piece's bytes [b, e) (b < e): from the first byte's source to the
  // last byte's, each widened to whole characters.
  Span original_of(size_t b, size_t e) const;

  // A part [b, e) of this piece, on character boundaries.
  Normalized slice(size_t b, size_t e) const;

  // Rewrites the piece character by character: `emit(c, out)` appends the replacement of code
  // point c (nothing removes it); each new character takes c's original range.
  void map_chars(const std::function<void(char32_t, std::u32string&)>& emit);
  // Replaces each byte range [b, e) of `ranges` (sorted, disjoint) by `replacement`, whose
  // characters take the original range of the replaced text's last byte (HF's replace).
  void replace_ranges(const std::vector<std::pair<size_t, size_t>>& ranges, std::string_view replacement);
  void prepend(std::string_view s);  // the new characters take the first character's range
  // Removes leading/trailing characters for which `drop` holds.
  void strip(bool left, bool right, const std::function<bool(char32_t)>& drop);
  // Replaces [b, e) of the text (a normalization segment) by `chars`: the i-th new character
  // takes the i-th old one's range, extra ones the last old one's (HF's alignment of
  // unicode_normalization's changes).
  void replace_segment(size_t b, size_t e, const std::u32string& chars);

  // Splits the piece by `cover` as HF's NormalizedString::split does for `behavior`; empty parts
  // are dropped.
  void split(const std::vector<PatternSplit>& cover, SplitBehavior behavior, std::vector<Normalized>& out) const;

 private:
  void materialize();  // gives the untouched piece its per-byte table
  Span byte_span(size_t i) const;

  std::string text_;
  std::vector<Span> align_;  // per byte; empty while untouched
  uint32_t shift_ = 0;
  Span original_{0, 0};
};

// The cover of `text` given by the matches of a predicate on characters (each matching character
// is one match), as HF's char patterns give it.
std::vector<PatternSplit> cover_by_chars(std::string_view text, const std::function<bool(char32_t)>& is_match);
// The cover given by regex matches ([begin, end) pairs, in order), optionally inverted.
std::vector<PatternSplit> cover_by_matches(size_t size, const std::vector<std::pair<size_t, size_t>>& matches,
                                           bool invert);

}  // namespace e3::tok
