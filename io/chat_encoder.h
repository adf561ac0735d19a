// Conversations and text into token ids and a loss mask, with the model's own tokenizer and
// chat template, as HF's apply_chat_template(tokenize=True) gives them (the rendered text
// tokenized without added special tokens; text lines with them). The mask comes from the
// characters of the rendered text that the template took from assistant messages (the
// interpreter tracks them), mapped to token offsets; never from token ids.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/named_enum.h"
#include "io/chat_input.h"
#include "io/jinja/template.h"
#include "io/tokenizer/tokenizer.h"

namespace e3::io {

// --mask: which tokens of a conversation the draft is trained on.
enum class MaskMode { Assistant, LastAssistant, All };
inline constexpr NamedValue<MaskMode> kMaskModeNames[] = {
    {MaskMode::Assistant, "assistant"}, {MaskMode::LastAssistant, "last-assistant"}, {MaskMode::All, "all"}};
constexpr const auto& name_table(MaskMode) { return kMaskModeNames; }

struct ChatOptions {
  std::filesystem::path tokenizer_dir;  // --tokenizer, else --model
  std::filesystem::path chat_template;  // --chat-template FILE; empty: the tokenizer's own
  MaskMode mask = MaskMode::Assistant;
  // What strftime_now() renders: fixed, so that a rerun renders (and so tokenizes) the same text.
  std::chrono::system_clock::time_point now;
};

// The fixed default of ChatOptions::now: 2024-07-26 00:00 UTC (Llama 3.1's own default date).
std::chrono::system_clock::time_point default_template_time();

struct EncodedSample {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  // With keep_text (tokenize --show): the text that was tokenized and each token's bytes in it.
  std::string text;
  std::vector<tok::Token> tokens;
};

// Byte ranges [begin, end) of the text whose tokens are trained on.
using Spans = std::vector<std::pair<size_t, size_t>>;

// 1 on every token overlapping a span, and on the end-of-turn token(s) the template writes right
// after the reply: tokens of `end_of_turn` that follow a span's last token directly or across
// whitespace-only template text (Llama-2's " </s>"), that whitespace included; 0 elsewhere.
// `spans` sorted and disjoint; `end_of_turn` sorted.
std::vector<uint8_t> mask_from_spans(const std::vector<tok::Token>& tokens, const Spans& spans,
                                     const std::vector<int32_t>& end_of_turn, std::string_view text);

// The ids that end a reply: the tokenizer's eos_token and generation_config.json's eos_token_id
// (an id or a list: Llama-3.1's <|eot_id|> and <|eom_id|>, GLM-4.5's <|user|> and <|observation|>)
// where `dir` has that file. Sorted, unique.
std::vector<int32_t> end_of_turn_ids(const tok::Tokenizer& tokenizer, const std::filesystem::path& dir);

class ChatEncoder {
 public:
  // The tokenizer of options.tokenizer_dir and the chat template (--chat-template, else the
  // tokenizer's). A missing tokenizer is a model error naming the directory; a template that
  // does not parse is an input error naming its file and line.
  static std::shared_ptr<const ChatEncoder> load(const ChatOptions& options);

  // One Messages or Text line; every problem (content, roles, a template error) is an input
  // error "WHERE: ...". Thread-safe.
  EncodedSample encode(const nlohmann::ordered_json& doc, LineKind kind, const std::string& where, bool keep_text) const;

  // What decides the ids and masks: the tokenizer, the template, the mask mode and the template time.
  const std::string& fingerprint() const { return fingerprint_; }
  const tok::Tokenizer& tokenizer() const { return tokenizer_; }
  const ChatOptions& options() const { return options_; }
  // Where the template came from, for the start-up line ("chat_template of DIR/tokenizer_config.json").
  const std::string& template_source() const { return template_source_; }

 private:
  ChatEncoder(ChatOptions options, tok::Tokenizer tokenizer);
  EncodedSample encode_conversation(const Conversation& c, const std::string& where, bool keep_text) const;

  ChatOptions options_;
  tok::Tokenizer tokenizer_;
  std::optional<jinja::Template> template_;  // none: the tokenizer has no chat template
  std::string template_source_;
  std::vector<int32_t> end_of_turn_;  // end_of_turn_ids()
  std::string fingerprint_;
};

}  // namespace e3::io
