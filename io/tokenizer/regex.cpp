#include "io/tokenizer/regex.h"

#include <oniguruma.h>

#include <mutex>

#include "core/error.h"
#include "io/tokenizer/unicode.h"

namespace e3::tok {

void ensure_oniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

MatchRegion::MatchRegion() : region_(onig_region_new()) {
  E3_REQUIRE(region_ != nullptr, ErrorKind::Internal, "out of memory for a regex region");
}
MatchRegion::~MatchRegion() { onig_region_free(static_cast<OnigRegion*>(region_), 1); }

Regex::Regex(const std::string& pattern, const std::string& where) : regex_(nullptr), pattern_(pattern) {
  ensure_oniguruma();
  OnigErrorInfo info;
  regex_t* reg = nullptr;
  auto* p = reinterpret_cast<const UChar*>(pattern.data());
  const int r = onig_new(&reg, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (r != ONIG_NORMAL) {
    UChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, r, &info);
    E3_THROW(ErrorKind::Model, "{}: bad regex '{}': {}", where, pattern, reinterpret_cast<char*>(message));
  }
  regex_ = reg;
}

Regex::~Regex() { onig_free(static_cast<regex_t*>(regex_)); }

void Regex::find_all(std::string_view text, MatchRegion& region, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* reg = static_cast<regex_t*>(regex_);
  auto* rgn = static_cast<OnigRegion*>(region.get());
  auto* begin = reinterpret_cast<const UChar*>(text.data());
  auto* end = begin + text.size();
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= text.size()) {
    // Most split patterns match at every position (their alternatives cover all characters): a
    // match anchored where the last one ended is the leftmost one, and skips the search set-up.
    int r = from < text.size() ? onig_match(reg, begin, end, begin + from, rgn, ONIG_OPTION_NONE) : ONIG_MISMATCH;
    if (r == ONIG_MISMATCH) r = onig_search(reg, begin, end, begin + from, end, rgn, ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    E3_REQUIRE(r >= 0, ErrorKind::Internal, "regex search failed ({}) for '{}'", r, pattern_);
    const auto s = static_cast<size_t>(rgn->beg[0]);
    const auto e = static_cast<size_t>(rgn->end[0]);
    if (s == e && have_last && last_end == e) {
      // An empty match where the last one ended: step over one character and search again.
      from += from < text.size() ? utf8_length(static_cast<unsigned char>(text[from])) : 1;
      continue;
    }
    out.emplace_back(s, e);
    from = e;
    last_end = e;
    have_last = true;
  }
}

std::string regex_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}-#& \t\n\r\f\v/").find(c) != std::string_view::npos) {
      switch (c) {
        case '\t': out += "\\t"; continue;
        case '\n': out += "\\n"; continue;
        case '\r': out += "\\r"; continue;
        case '\f': out += "\\f"; continue;
        case '\v': out += "\\v"; continue;
        case ' ': out += ' '; continue;
        default: out += '\\';
      }
    }
    out += c;
  }
  return out;
}

}  // namespace e3::tok
