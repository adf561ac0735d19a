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

using json = nlohmann::ordered_json;

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
                                     const std::vector<int32_t>& end_of_turn, std::string_view text) {
  std::vector<uint8_t> mask(tokens.size(), 0);
  auto is_end = [&](int32_t id) { return std::binary_search(end_of_turn.begin(), end_of_turn.end(), id); };
  auto is_blank = [&](const tok::Token& t) {
    if (t.begin >= t.end || t.end > text.size()) return false;
    for (size_t b = t.begin; b < t.end; ++b)
      if (text[b] != ' ' && text[b] != '\n' && text[b] != '\t' && text[b] != '\r') return false;
    return true;
  };
  size_t k = 0;
  for (const auto& [begin, end] : spans) {
    while (k < tokens.size() && tokens[k].end <= begin) ++k;  // tokens wholly before the span
    for (; k < tokens.size() && tokens[k].begin < end; ++k) mask[k] = 1;
    // The end-of-turn token(s), but only template text: a literal "<|eot_id|>" inside the reply
    // is inside the span already, and the next turn's header is not an end token.
    size_t j = k;
    while (j < tokens.size() && is_blank(tokens[j]) && !is_end(tokens[j].id)) ++j;
    if (j < tokens.size() && is_end(tokens[j].id)) {
      for (; k <= j; ++k) mask[k] = 1;
      while (k < tokens.size() && is_end(tokens[k].id)) mask[k++] = 1;
    }
  }
  return mask;
}

std::vector<int32_t> end_of_turn_ids(const tok::Tokenizer& tokenizer, const std::filesystem::path& dir) {
  std::vector<int32_t> ids;
  if (!tokenizer.config().eos_token.empty())
    if (auto id = tokenizer.token_to_id(tokenizer.config().eos_token)) ids.push_back(*id);
  const std::filesystem::path generation_config = dir / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(generation_config, ec)) {
    const json g = json::parse(RegularFile(generation_config, ErrorKind::Model, "").read_all(generation_config, ErrorKind::Model),
                               nullptr, /*allow_exceptions=*/false);
    E3_REQUIRE(!g.is_discarded() && g.is_object(), ErrorKind::Model, "{}: not a JSON object", generation_config.string());
    const json eos = g.value("eos_token_id", json());
    for (const json& v : eos.is_array() ? eos : json::array({eos}))
      if (v.is_number_integer()) ids.push_back(v.get<int32_t>());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
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
  e->end_of_turn_ = end_of_turn_ids(e->tokenizer_, options.tokenizer_dir);
  Fnv1a h;
  h.update(e->tokenizer_.fingerprint()).update("\n").update(source).update("\n");
  h.update(name_of(options.mask)).update("\n");
  for (int32_t id : e->end_of_turn_) h.update(fmt::format("{} ", id));
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
  json context = json::object();
  if (tokenizer_.config().template_variables.is_object())
    for (const auto& item : tokenizer_.config().template_variables.items()) context[item.key()] = item.value();
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
  s.mask = mask_from_spans(tokens, merged(std::move(spans)), end_of_turn_, r.text);
  s.ids.reserve(tokens.size());
  for (const tok::Token& t : tokens) s.ids.push_back(t.id);
  if (keep_text) {
    s.text = std::move(r.text);
    s.tokens = std::move(tokens);
  }
  return s;
}

}  // namespace e3::io
