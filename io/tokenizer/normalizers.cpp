#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/tokenizer/components.h"
#include "io/tokenizer/unicode.h"

namespace e3::tok {

namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void apply(Normalized& n, Scratch& scratch) const override {
    for (const auto& p : parts_) p->apply(n, scratch);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void apply(Normalized& n, Scratch&) const override {
    const auto changed = normalize_segments(n.text(), form_);
    for (auto it = changed.rbegin(); it != changed.rend(); ++it) n.replace_segment(it->begin, it->end, it->normalized);
  }

 private:
  NormalForm form_;
};

class Lowercase final : public Normalizer {
 public:
  void apply(Normalized& n, Scratch&) const override {
    bool changes = false;
    for (char c : n.text()) changes |= (c >= 'A' && c <= 'Z') || static_cast<unsigned char>(c) >= 0x80;
    if (changes) n.map_chars([](char32_t c, std::u32string& out) { lowercase_into(c, out); });
  }
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void apply(Normalized& n, Scratch&) const override {
    n.strip(left_, right_, [](char32_t c) { return has_property(c, Property::WhiteSpace); });
  }

 private:
  bool left_, right_;
};

class StripAccents final : public Normalizer {
 public:
  void apply(Normalized& n, Scratch&) const override {
    bool any = false;
    for (char c : n.text()) any |= static_cast<unsigned char>(c) >= 0x80;
    if (!any) return;
    n.map_chars([](char32_t c, std::u32string& out) {
      if (!has_property(c, Property::Mark)) out.push_back(c);
    });
  }
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string s) : s_(std::move(s)) {}
  void apply(Normalized& n, Scratch&) const override { n.prepend(s_); }

 private:
  std::string s_;
};

class Replace final : public Normalizer {
 public:
  Replace(const std::string& pattern, std::string content, const std::string& where)
      : regex_(pattern, where), content_(std::move(content)) {}
  void apply(Normalized& n, Scratch& scratch) const override {
    scratch.matches.clear();
    regex_.find_all(n.text(), scratch.region, scratch.matches);
    n.replace_ranges(scratch.matches, content_);
  }

 private:
  Regex regex_;
  std::string content_;
};

bool flag(const nlohmann::json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::string string_of(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  E3_REQUIRE(it != j.end() && it->is_string(), ErrorKind::Model, "{}: '{}' must be a string", where, key);
  return it->get<std::string>();
}

}  // namespace

std::string pattern_source(const nlohmann::json& j, const std::string& where) {
  E3_REQUIRE(j.is_object() && j.size() == 1, ErrorKind::Model, "{}: a pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}",
             where);
  if (j.contains("String")) return regex_escape(string_of(j, "String", where));
  if (j.contains("Regex")) return string_of(j, "Regex", where);
  E3_THROW(ErrorKind::Model, "{}: a pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", where);
}

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  E3_REQUIRE(j.is_object() && j.contains("type") && j["type"].is_string(), ErrorKind::Model,
             "{}: a normalizer must be an object with a \"type\"", where);
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    const auto& list = j.value("normalizers", nlohmann::json::array());
    E3_REQUIRE(list.is_array(), ErrorKind::Model, "{}: Sequence's 'normalizers' must be a list", where);
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_normalizer(list[i], fmt::format("{}.normalizers[{}]", where, i));
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::NFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") return std::make_unique<Strip>(flag(j, "strip_left", true), flag(j, "strip_right", true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Prepend") return std::make_unique<Prepend>(string_of(j, "prepend", where));
  if (type == "Replace") {
    E3_REQUIRE(j.contains("pattern"), ErrorKind::Model, "{}: Replace needs a 'pattern'", where);
    return std::make_unique<Replace>(pattern_source(j["pattern"], where + ".pattern"), string_of(j, "content", where),
                                     where);
  }
  E3_THROW(ErrorKind::Model, "{}: normalizer type '{}' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, "
           "Strip, StripAccents, Prepend, Replace, Sequence)", where, type);
}

}  // namespace e3::tok
