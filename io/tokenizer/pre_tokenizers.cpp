#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/tokenizer/components.h"
#include "io/tokenizer/unicode.h"

namespace e3::tok {

namespace {

// A pre-tokenizer that replaces each piece by its parts independently of the others.
class PieceSplitter : public PreTokenizer {
 public:
  void apply(std::vector<Normalized>& pieces, Scratch& scratch) const override {
    std::vector<Normalized> out;
    out.reserve(pieces.size() * 2);
    for (auto& p : pieces) split_one(p, out, scratch);
    pieces.swap(out);
  }
  virtual void split_one(Normalized& piece, std::vector<Normalized>& out, Scratch& scratch) const = 0;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void apply(std::vector<Normalized>& pieces, Scratch& scratch) const override {
    for (const auto& p : parts_) p->apply(pieces, scratch);
  }
  bool isolated_regex_chain(std::vector<const Regex*>& chain) const override {
    for (const auto& p : parts_)
      if (!p->isolated_regex_chain(chain)) return false;
    return true;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class RegexSplit final : public PieceSplitter {
 public:
  RegexSplit(const std::string& pattern, SplitBehavior behavior, bool invert, const std::string& where)
      : regex_(pattern, where), behavior_(behavior), invert_(invert) {}
  void split_one(Normalized& piece, std::vector<Normalized>& out, Scratch& scratch) const override {
    scratch.matches.clear();
    regex_.find_all(piece.text(), scratch.region, scratch.matches);
    // The common case (Isolated, not inverted) without building the cover.
    if (behavior_ == SplitBehavior::Isolated && !invert_) {
      size_t prev = 0;
      for (auto [s, e] : scratch.matches) {
        if (prev < s) out.push_back(piece.slice(prev, s));
        if (s < e) out.push_back(piece.slice(s, e));
        prev = e;
      }
      if (prev < piece.text().size()) out.push_back(prev == 0 ? std::move(piece) : piece.slice(prev, piece.text().size()));
      return;
    }
    piece.split(cover_by_matches(piece.text().size(), scratch.matches, invert_), behavior_, out);
  }
  bool isolated_regex_chain(std::vector<const Regex*>& chain) const override {
    if (behavior_ != SplitBehavior::Isolated || invert_) return false;
    chain.push_back(&regex_);
    return true;
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class CharSplit final : public PieceSplitter {
 public:
  CharSplit(std::function<bool(char32_t)> is_match, SplitBehavior behavior)
      : is_match_(std::move(is_match)), behavior_(behavior) {}
  void split_one(Normalized& piece, std::vector<Normalized>& out, Scratch&) const override {
    piece.split(cover_by_chars(piece.text(), is_match_), behavior_, out);
  }

 private:
  std::function<bool(char32_t)> is_match_;
  SplitBehavior behavior_;
};

// GPT-2's split (HF's ByteLevel regex) and the leading space; the byte mapping itself is left to
// the model, which works on raw bytes.
class ByteLevelSplit final : public PieceSplitter {
 public:
  ByteLevelSplit(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex)
      regex_ = std::make_unique<Regex>(
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", where);
  }
  bool is_noop() const { return !add_prefix_space_ && !regex_; }
  void split_one(Normalized& piece, std::vector<Normalized>& out, Scratch& scratch) const override {
    if (add_prefix_space_ && piece.text()[0] != ' ') piece.prepend(" ");
    if (!regex_) {
      out.push_back(std::move(piece));
      return;
    }
    scratch.matches.clear();
    regex_->find_all(piece.text(), scratch.region, scratch.matches);
    piece.split(cover_by_matches(piece.text().size(), scratch.matches, false), SplitBehavior::Isolated, out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class Metaspace final : public PieceSplitter {
 public:
  enum class Prepend { First, Always, Never };
  Metaspace(std::string replacement, Prepend scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {
    size_t len = 0;
    replacement_char_ = decode_utf8(replacement_, 0, &len);
  }
  void split_one(Normalized& piece, std::vector<Normalized>& out, Scratch&) const override {
    std::vector<std::pair<size_t, size_t>> spaces;
    const std::string& t = piece.text();
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i] == ' ') spaces.emplace_back(i, i + 1);
    piece.replace_ranges(spaces, replacement_);
    const bool starts = piece.text().compare(0, replacement_.size(), replacement_) == 0;
    if (!starts && (scheme_ == Prepend::Always || (scheme_ == Prepend::First && piece.original().first == 0)))
      piece.prepend(replacement_);
    if (!split_) {
      out.push_back(std::move(piece));
      return;
    }
    const char32_t r = replacement_char_;
    piece.split(cover_by_chars(piece.text(), [r](char32_t c) { return c == r; }), SplitBehavior::MergedWithNext, out);
  }

 private:
  std::string replacement_;
  char32_t replacement_char_;
  Prepend scheme_;
  bool split_;
};

bool flag(const nlohmann::json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// Rust regex's \w and \s as Oniguruma property classes.
constexpr const char* kWordClass = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control})";

bool is_punctuation(char32_t c) { return has_property(c, Property::Punctuation); }
bool is_space(char32_t c) { return has_property(c, Property::WhiteSpace); }
bool is_numeric(char32_t c) { return has_property(c, Property::Numeric); }

}  // namespace

SplitBehavior split_behavior(const nlohmann::json& j, const std::string& where) {
  const std::string name = j.is_string() ? j.get<std::string>() : "";
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  E3_THROW(ErrorKind::Model, "{}: unknown split behavior {} (Removed, Isolated, MergedWithPrevious, MergedWithNext, "
           "Contiguous)", where, j.dump());
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where,
                                                 PreTokenizerInfo& info) {
  if (j.is_null()) return nullptr;
  E3_REQUIRE(j.is_object() && j.contains("type") && j["type"].is_string(), ErrorKind::Model,
             "{}: a pre-tokenizer must be an object with a \"type\"", where);
  const std::string type = j["type"].get<std::string>();
  E3_REQUIRE(!info.byte_level, ErrorKind::Model,
             "{}: a pre-tokenizer after ByteLevel is not supported (ByteLevel must come last)", where);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    const auto& list = j.value("pretokenizers", nlohmann::json::array());
    E3_REQUIRE(list.is_array(), ErrorKind::Model, "{}: Sequence's 'pretokenizers' must be a list", where);
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", where, i), info);
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "ByteLevel") {
    auto p = std::make_unique<ByteLevelSplit>(flag(j, "add_prefix_space", true), flag(j, "use_regex", true), where);
    info.byte_level = true;
    if (p->is_noop()) return nullptr;
    return p;
  }
  if (type == "Split") {
    E3_REQUIRE(j.contains("pattern") && j.contains("behavior"), ErrorKind::Model,
               "{}: Split needs 'pattern' and 'behavior'", where);
    return std::make_unique<RegexSplit>(pattern_source(j["pattern"], where + ".pattern"),
                                        split_behavior(j["behavior"], where + ".behavior"), flag(j, "invert", false),
                                        where);
  }
  if (type == "Metaspace") {
    std::string replacement = j.value("replacement", std::string("\u2581"));
    E3_REQUIRE(!replacement.empty(), ErrorKind::Model, "{}: Metaspace's replacement is empty", where);
    size_t len = 0;
    decode_utf8(replacement, 0, &len);
    E3_REQUIRE(len == replacement.size(), ErrorKind::Model, "{}: Metaspace's replacement must be one character", where);
    Metaspace::Prepend scheme = Metaspace::Prepend::Always;
    if (j.contains("prepend_scheme")) {
      const std::string s = j["prepend_scheme"].is_string() ? j["prepend_scheme"].get<std::string>() : "";
      if (s == "first") scheme = Metaspace::Prepend::First;
      else if (s == "always") scheme = Metaspace::Prepend::Always;
      else if (s == "never") scheme = Metaspace::Prepend::Never;
      else E3_THROW(ErrorKind::Model, "{}: unknown prepend_scheme {} (first, always, never)", where, j["prepend_scheme"].dump());
    }
    if (j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean() && !j["add_prefix_space"].get<bool>())
      scheme = Metaspace::Prepend::Never;
    return std::make_unique<Metaspace>(replacement, scheme, flag(j, "split", true));
  }
  if (type == "Digits") {
    return std::make_unique<CharSplit>(is_numeric, flag(j, "individual_digits", false) ? SplitBehavior::Isolated
                                                                                       : SplitBehavior::Contiguous);
  }
  if (type == "Punctuation") {
    return std::make_unique<CharSplit>(
        is_punctuation, j.contains("behavior") ? split_behavior(j["behavior"], where + ".behavior") : SplitBehavior::Isolated);
  }
  if (type == "Whitespace") {
    const std::string word = kWordClass;
    return std::make_unique<RegexSplit>("[" + word + "]+|[^" + word + R"(\p{White_Space}]+)", SplitBehavior::Removed,
                                        true, where);
  }
  if (type == "WhitespaceSplit") return std::make_unique<CharSplit>(is_space, SplitBehavior::Removed);
  if (type == "CharDelimiterSplit") {
    const std::string d = j.value("delimiter", std::string());
    size_t len = 0;
    E3_REQUIRE(!d.empty(), ErrorKind::Model, "{}: CharDelimiterSplit needs a delimiter", where);
    const char32_t c = decode_utf8(d, 0, &len);
    return std::make_unique<CharSplit>([c](char32_t x) { return x == c; }, SplitBehavior::Removed);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    parts.push_back(std::make_unique<CharSplit>(is_space, SplitBehavior::Removed));
    parts.push_back(std::make_unique<CharSplit>(is_punctuation, SplitBehavior::Isolated));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  E3_THROW(ErrorKind::Model, "{}: pre-tokenizer type '{}' is not supported (supported: ByteLevel, Split, Metaspace, "
           "Digits, Punctuation, Whitespace, WhitespaceSplit, CharDelimiterSplit, BertPreTokenizer, Sequence)", where, type);
}

}  // namespace e3::tok
