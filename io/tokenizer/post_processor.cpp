#include "io/tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace e3::tok {

namespace {

// HF's process_offsets: moves each token's offsets past its leading and trailing whitespace.
void trim_offsets(std::vector<Token>& tokens, const TrimCounts& trim, bool add_prefix_space) {
  for (size_t i = 0; i < tokens.size() && i < trim.size(); ++i) {
    Token& t = tokens[i];
    uint32_t leading = trim[i].first;
    const uint32_t trailing = trim[i].second;
    if (leading == 0 && trailing == 0) continue;
    if (leading > 0) {
      const bool first = i == 0 || t.begin == 0;
      if (first && add_prefix_space && leading == 1) leading = 0;
      t.begin = std::min(t.begin + leading, t.end);
    }
    if (trailing > 0 && t.end >= trailing) t.end = std::max(t.end - trailing, t.begin);
  }
}

class ByteLevelOffsets final : public PostProcessor {
 public:
  ByteLevelOffsets(bool trim, bool add_prefix_space) : trim_(trim), add_prefix_space_(add_prefix_space) {}
  void process(std::vector<Token>& tokens, TrimCounts& trim, bool) const override {
    if (trim_) trim_offsets(tokens, trim, add_prefix_space_);
  }
  bool trims_offsets() const override { return trim_; }

 private:
  bool trim_, add_prefix_space_;
};

// Special tokens before and after the text (TemplateProcessing's single, Roberta's and Bert's
// cls/sep), each at offsets (0, 0).
class Surround final : public PostProcessor {
 public:
  Surround(std::vector<int32_t> before, std::vector<int32_t> after, bool trim, bool add_prefix_space)
      : before_(std::move(before)), after_(std::move(after)), trim_(trim), add_prefix_space_(add_prefix_space) {}
  void process(std::vector<Token>& tokens, TrimCounts& trim, bool add_special_tokens) const override {
    if (trim_) trim_offsets(tokens, trim, add_prefix_space_);
    if (!add_special_tokens || (before_.empty() && after_.empty())) return;
    std::vector<Token> out;
    out.reserve(tokens.size() + before_.size() + after_.size());
    for (int32_t id : before_) out.push_back({id, 0, 0});
    out.insert(out.end(), tokens.begin(), tokens.end());
    for (int32_t id : after_) out.push_back({id, 0, 0});
    tokens.swap(out);
    if (!trim.empty()) {
      TrimCounts t(before_.size(), {0, 0});
      t.insert(t.end(), trim.begin(), trim.end());
      t.insert(t.end(), after_.size(), {0, 0});
      trim.swap(t);
    }
  }
  bool trims_offsets() const override { return trim_; }

 private:
  std::vector<int32_t> before_, after_;
  bool trim_, add_prefix_space_;
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<Token>& tokens, TrimCounts& trim, bool add_special_tokens) const override {
    for (const auto& p : parts_) p->process(tokens, trim, add_special_tokens);
  }
  bool trims_offsets() const override {
    for (const auto& p : parts_)
      if (p->trims_offsets()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

bool flag(const nlohmann::json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

int32_t pair_id(const nlohmann::json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  E3_REQUIRE(it != j.end() && it->is_array() && it->size() == 2 && (*it)[1].is_number_integer(), ErrorKind::Model,
             "{}: '{}' must be [token, id]", where, key);
  return (*it)[1].get<int32_t>();
}

std::unique_ptr<PostProcessor> make_template(const nlohmann::json& j, const std::string& where) {
  const auto single = j.find("single");
  E3_REQUIRE(single != j.end() && single->is_array(), ErrorKind::Model,
             "{}: TemplateProcessing needs a 'single' list", where);
  const auto specials = j.value("special_tokens", nlohmann::json::object());
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const auto& piece = (*single)[i];
    const std::string at = fmt::format("{}.single[{}]", where, i);
    if (piece.contains("Sequence")) {
      const auto id = piece["Sequence"].value("id", std::string());
      E3_REQUIRE(id == "A", ErrorKind::Model, "{}: a single template can only hold sequence A, not '{}'", at, id);
      E3_REQUIRE(!seen_sequence, ErrorKind::Model, "{}: sequence A appears twice", at);
      seen_sequence = true;
      continue;
    }
    E3_REQUIRE(piece.contains("SpecialToken"), ErrorKind::Model, "{}: a piece must be SpecialToken or Sequence", at);
    const auto name = piece["SpecialToken"].value("id", std::string());
    auto it = specials.find(name);
    E3_REQUIRE(it != specials.end() && it->contains("ids") && (*it)["ids"].is_array(), ErrorKind::Model,
               "{}: special token '{}' is not in special_tokens", at, name);
    for (const auto& id : (*it)["ids"]) (seen_sequence ? after : before).push_back(id.get<int32_t>());
  }
  E3_REQUIRE(seen_sequence, ErrorKind::Model, "{}: the single template has no sequence A", where);
  return std::make_unique<Surround>(std::move(before), std::move(after), false, false);
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  E3_REQUIRE(j.is_object() && j.contains("type") && j["type"].is_string(), ErrorKind::Model,
             "{}: a post-processor must be an object with a \"type\"", where);
  const std::string type = j["type"].get<std::string>();
  if (type == "TemplateProcessing") return make_template(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelOffsets>(flag(j, "trim_offsets", true), flag(j, "add_prefix_space", true));
  if (type == "RobertaProcessing")
    return std::make_unique<Surround>(std::vector<int32_t>{pair_id(j, "cls", where)},
                                      std::vector<int32_t>{pair_id(j, "sep", where)}, flag(j, "trim_offsets", true),
                                      flag(j, "add_prefix_space", true));
  if (type == "BertProcessing")
    return std::make_unique<Surround>(std::vector<int32_t>{pair_id(j, "cls", where)},
                                      std::vector<int32_t>{pair_id(j, "sep", where)}, false, false);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    const auto& list = j.value("processors", nlohmann::json::array());
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_post_processor(list[i], fmt::format("{}.processors[{}]", where, i));
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  E3_THROW(ErrorKind::Model, "{}: post-processor type '{}' is not supported (supported: TemplateProcessing, ByteLevel, "
           "RobertaProcessing, BertProcessing, Sequence)", where, type);
}

std::unique_ptr<PostProcessor> make_bos_eos_template(int32_t bos_id, int32_t eos_id) {
  std::vector<int32_t> before, after;
  if (bos_id >= 0) before.push_back(bos_id);
  if (eos_id >= 0) after.push_back(eos_id);
  return std::make_unique<Surround>(std::move(before), std::move(after), false, false);
}

}  // namespace e3::tok
