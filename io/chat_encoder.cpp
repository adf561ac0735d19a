#include "io/chat_encoder.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"
#include "core/json_read.h"

namespace e3::io {
namespace {

using nlohmann::json;

// The tag a message's strings carry through the template: its index + 1 (0 is "no tag").
int32_t tag_of_message(size_t index) { return static_cast<int32_t>(index) + 1; }

// The keys of an assistant message whose text the assistant wrote, so that its tokens are trained on.
constexpr const char* kAssistantKeys[] = {"content", "reasoning_content", "tool_calls"};

Spans merged(Spans spans) {
  std::sort(spans.begin(), spans.end());
  Spans out;
  for (const auto& s : spans) {
    if (s.first >= s.second) continue;
    if (!out.empty() && s.first <= out.back().second)
      out.back().second = std::max(out.back().second, s.second);
    else
      out.push_back(s);
  }
  return out;
}

std::string read_template_file(const std::filesystem::path& path) {
  return RegularFile(path, ErrorKind::Usage, "--chat-template: ").read_all(path, ErrorKind::Usage);
}

}  // namespace

std::chrono::system_clock::time_point default_template_time() {
  // 2024-07-26 00:00:00 UTC as seconds since the epoch.
  return std::chrono::system_clock::time_point(std::chrono::seconds(1721952000));
}

std::vector<uint8_t> mask_from_spans(const std::vector<tok::Token>& tokens, const Spans& spans,
                                     const tok::Tokenizer& tokenizer) {
  std::vector<uint8_t> mask(tokens.size(), 0);
  size_t k = 0;
  for (const auto& [begin, end] : spans) {
    while (k < tokens.size() && tokens[k].end <= begin) ++k;  // tokens wholly before the span
    size_t reached = end;
    for (; k < tokens.size() && tokens[k].begin < end; ++k) {
      mask[k] = 1;
      reached = std::max<size_t>(reached, tokens[k].end);
    }
    // The end-of-turn token(s): special tokens starting exactly where the reply's tokens stop,
    // with no template text between (Llama's <|eot_id|>, ChatML's <|im_end|>).
    for (; k < tokens.size() && tokens[k].begin == reached && tokenizer.is_special(tokens[k].id); ++k) {
      mask[k] = 1;
      reached = tokens[k].end;
    }
  }
  return mask;
}

ChatEncoder::ChatEncoder(ChatOptions options, tok::Tokenizer tokenizer)
    : options_(std::move(options)), tokenizer_(std::move(tokenizer)) {}

std::shared_ptr<const ChatEncoder> ChatEncoder::load(const ChatOptions& options) {
  std::shared_ptr<ChatEncoder> e(new ChatEncoder(options, tok::Tokenizer::load(options.tokenizer_dir)));
  std::string source;
  if (!options.chat_template.empty()) {
    source = read_template_file(options.chat_template);
    e->template_source_ = options.chat_template.string();
  } else if (e->tokenizer_.config().chat_template) {
    source = *e->tokenizer_.config().chat_template;
    e->template_source_ = fmt::format("the chat template of {}", options.tokenizer_dir.string());
  }
  if (!e->template_source_.empty()) e->template_.emplace(jinja::Template::parse(source, e->template_source_));
  Fnv1a h;
  h.update(e->tokenizer_.fingerprint()).update("\n").update(source).update("\n");
  h.update(name_of(options.mask)).update("\n");
  h.update(fmt::format("{}", std::chrono::duration_cast<std::chrono::seconds>(options.now.time_since_epoch()).count()));
  e->fingerprint_ = h.hex();
  return e;
}

EncodedSample ChatEncoder::encode(const json& doc, LineKind kind, const std::string& where, bool keep_text) const {
  if (kind == LineKind::Messages) return encode_conversation(parse_conversation(doc, where), where, keep_text);
  E3_REQUIRE(kind == LineKind::Text, ErrorKind::Internal, "ChatEncoder::encode: not a text kind");
  bool has_id = false;
  std::string id;
  const std::string text = parse_text_line(doc, where, has_id, id);
  EncodedSample s;
  // As the tokenizer does with its own special tokens (BOS, and whatever its post-processor adds).
  std::vector<tok::Token> tokens = tokenizer_.encode(text, /*add_special_tokens=*/true);
  s.ids.reserve(tokens.size());
  for (const tok::Token& t : tokens) s.ids.push_back(t.id);
  s.mask.assign(s.ids.size(), 1);
  if (keep_text) {
    s.text = text;
    s.tokens = std::move(tokens);
  }
  return s;
}

EncodedSample ChatEncoder::encode_conversation(const Conversation& c, const std::string& where, bool keep_text) const {
  E3_REQUIRE(template_.has_value(), ErrorKind::Input,
             "{}: a conversation needs a chat template, and {} has none (no chat_template in its "
             "tokenizer_config.json, no chat_template.jinja): give --chat-template FILE",
             where, options_.tokenizer_dir.string());
  // What HF's apply_chat_template passes: the messages, tools (None when absent), the
  // generation prompt off (the conversation is complete), and the special tokens by name.
  json context = tokenizer_.config().template_variables.is_object() ? tokenizer_.config().template_variables
                                                                     : json::object();
  context["messages"] = c.messages;
  context["tools"] = c.tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = false;
  if (c.template_kwargs.is_object())
    for (const auto& item : c.template_kwargs.items()) context[item.key()] = item.value();

  std::vector<std::pair<std::string, int32_t>> tags;
  for (size_t i : c.assistant)
    for (const char* key : kAssistantKeys)
      if (c.messages[i].contains(key)) tags.emplace_back(fmt::format("/messages/{}/{}", i, key), tag_of_message(i));

  jinja::Rendered r;
  try {
    r = template_->render(context, tags, {options_.now});
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Input) throw;
    E3_THROW(ErrorKind::Input, "{}: {}", where, e.what());
  }
  std::vector<tok::Token> tokens = tokenizer_.encode(r.text, /*add_special_tokens=*/false);

  Spans spans;
  if (options_.mask == MaskMode::All) {
    spans.emplace_back(0, r.text.size());
  } else if (!r.generation.empty()) {
    // The template marks the reply itself ({% generation %}): trust it, as HF's assistant masks do.
    if (options_.mask == MaskMode::LastAssistant)
      spans.push_back(r.generation.back());
    else
      spans = r.generation;
  } else {
    const int32_t last = c.assistant.empty() ? -1 : tag_of_message(c.assistant.back());
    for (const jinja::Origin& o : r.origins)
      if (o.tag > 0 && (options_.mask == MaskMode::Assistant || o.tag == last)) spans.emplace_back(o.begin, o.end);
  }
  EncodedSample s;
  s.mask = mask_from_spans(tokens, merged(std::move(spans)), tokenizer_);
  s.ids.reserve(tokens.size());
  for (const tok::Token& t : tokens) s.ids.push_back(t.id);
  if (keep_text) {
    s.text = std::move(r.text);
    s.tokens = std::move(tokens);
  }
  return s;
}

}  // namespace e3::io
