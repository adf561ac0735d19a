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

namespace {

// Compiles `pattern` as HF's onig crate does; the error code, with `info` filled, when it fails.
int compile(const std::string& pattern, regex_t** out, OnigErrorInfo* info) {
  auto* p = reinterpret_cast<const UChar*>(pattern.data());
  return onig_new(out, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, info);
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) : regex_(nullptr), pattern_(pattern) {
  ensure_oniguruma();
  OnigErrorInfo info;
  regex_t* reg = nullptr;
  const int r = compile(pattern, &reg, &info);
  if (r != ONIG_NORMAL) {
    UChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, r, &info);
    E3_THROW(ErrorKind::Model, "{}: bad regex '{}': {}", where, pattern, reinterpret_cast<char*>(message));
  }
  regex_ = reg;
  const bool plain = onig_number_of_captures(reg) == 0 && pattern.find("\\G") == std::string::npos &&
                     pattern.find("\\g") == std::string::npos && pattern.find("\\k") == std::string::npos;
  if (!plain) return;
  const std::string one = "(?>(" + pattern + "))";
  std::string batch;
  for (int k = 1; k < kBatch; ++k) batch = "(?:" + one + batch + ")?";
  batch = one + batch;
  regex_t* b = nullptr;
  if (compile(batch, &b, &info) == ONIG_NORMAL && onig_number_of_captures(b) == kBatch) {
    batch_ = b;
  } else if (b) {
    onig_free(b);
  }
}

Regex::~Regex() {
  onig_free(static_cast<regex_t*>(regex_));
  if (batch_) onig_free(static_cast<regex_t*>(batch_));
}

void Regex::find_all(std::string_view text, MatchRegion& region, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* rgn = static_cast<OnigRegion*>(region.get());
  auto* begin = reinterpret_cast<const UChar*>(text.data());
  auto* end = begin + text.size();
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  bool batched = batch_ != nullptr;
  while (from <= text.size()) {
    auto* reg = static_cast<regex_t*>(batched ? batch_ : regex_);
    // Most split patterns match at every position (their alternatives cover all characters): a
    // match anchored where the last one ended is the leftmost one, and skips the search set-up.
    int r = from < text.size() ? onig_match(reg, begin, end, begin + from, rgn, ONIG_OPTION_NONE) : ONIG_MISMATCH;
    if (r == ONIG_MISMATCH) r = onig_search(reg, begin, end, begin + from, end, rgn, ONIG_OPTION_NONE);
    if (r == ONIG_MISMATCH) break;
    if (r < 0 && batched) {
      // A limit of the engine's (retries, stack) reached by the batch: go on one match a call.
      batched = false;
      continue;
    }
    E3_REQUIRE(r >= 0, ErrorKind::Internal, "regex search failed ({}) for '{}'", r, pattern_);
    const int groups = batched ? kBatch : 0;
    for (int g = batched ? 1 : 0; g <= groups && rgn->beg[g] != ONIG_REGION_NOTPOS; ++g) {
      const auto s = static_cast<size_t>(rgn->beg[g]);
      const auto e = static_cast<size_t>(rgn->end[g]);
      if (s == e && have_last && last_end == e) {
        // An empty match where the last one ended: step over one character and search again
        // (the later groups of a batch are then void: they followed this match).
        from += from < text.size() ? utf8_length(static_cast<unsigned char>(text[from])) : 1;
        break;
      }
      out.emplace_back(s, e);
      from = e;
      last_end = e;
      have_last = true;
    }
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
