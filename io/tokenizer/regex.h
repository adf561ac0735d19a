// Oniguruma, as HF's tokenizers call it (the Rust onig crate): its default syntax, UTF-8, and the
// crate's rule for empty matches when iterating. A compiled Regex is shared by all threads; each
// search brings its own MatchRegion.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace e3::tok {

void ensure_oniguruma();  // the library's one-time set-up, before any table or regex use

class MatchRegion {  // per-thread search state (an OnigRegion)
 public:
  MatchRegion();
  ~MatchRegion();
  MatchRegion(const MatchRegion&) = delete;
  MatchRegion& operator=(const MatchRegion&) = delete;
  void* get() const { return region_; }

 private:
  void* region_;
};

class Regex {
 public:
  // Throws e3::Error(Model) "WHERE: bad regex 'PATTERN': why".
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every match of the pattern in `text`, as [begin, end) byte pairs, appended to `out`. Empty
  // matches right where the previous match ended are skipped, as the onig crate does.
  void find_all(std::string_view text, MatchRegion& region, std::vector<std::pair<size_t, size_t>>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  void* regex_;
  // The pattern as kBatch consecutive matches in one call, `(?>(P))(?:(?>(P))(?:...)?)?`: each
  // Oniguruma call copies its backtracking stack to the heap and back (malloc, a 5 KB memcpy,
  // free) whatever the match, which was most of the time of a short word. An atomic group
  // matches exactly what P alone matches there, and group k is then the k-th match of the
  // iteration. Null where P has groups of its own, \G or back-references (copies would change
  // their meaning).
  static constexpr int kBatch = 16;
  void* batch_ = nullptr;
  std::string pattern_;
};

// `text` with Oniguruma's metacharacters escaped, to match it literally.
std::string regex_escape(std::string_view text);

}  // namespace e3::tok
