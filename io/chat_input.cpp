#include "io/chat_input.h"

#include <array>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_read.h"
#include "core/named_enum.h"

namespace e3::io {
namespace {

using json = nlohmann::ordered_json;

constexpr size_t kMaxIdBytes = 4096;  // HDF5 keeps the id as an attribute, which must stay small

std::string quoted(const json& v) { return json_excerpt(v, 80); }

// Where the first control character of `id` starts: C0 (NUL, newline, escape...), DEL, or C1
// (U+0080..U+009F, which some terminals obey as escapes too). The JSON parser has already
// checked the UTF-8, so C1 is exactly the byte pair C2 80..C2 9F.
std::optional<size_t> control_character_at(std::string_view id) {
  for (size_t i = 0; i < id.size(); ++i) {
    const auto c = static_cast<unsigned char>(id[i]);
    if (c < 0x20 || c == 0x7F) return i;
    if (c == 0xC2 && i + 1 < id.size() && (static_cast<unsigned char>(id[i + 1]) & 0xE0) == 0x80) return i;
  }
  return std::nullopt;
}

// "unknown key \"x\": did you mean \"y\"?" for a key outside `known`, or nothing.
void require_known_keys(const json& object, const std::vector<std::string_view>& known, const std::string& where,
                        std::string_view what) {
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    bool ok = false;
    for (std::string_view k : known) ok = ok || k == key;
    if (ok) continue;
    const std::optional<std::string_view> guess = closest_name(key, known);
    std::string list;
    for (std::string_view k : known) list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", k);
    E3_THROW(ErrorKind::Input, "{}: unknown key \"{}\" in {}{} ({} holds only {})", where, clip(key, 80), what,
             guess ? fmt::format(": did you mean \"{}\"?", *guess) : "", what, list);
  }
}

// A message's content as the templates take it: a string, null, or a list of parts whose text
// parts are joined (the OpenAI form); anything else, images first, is refused by name.
json content_of(const json& content, const std::string& where) {
  if (content.is_string() || content.is_null()) return content;
  E3_REQUIRE(content.is_array(), ErrorKind::Input, "{}: \"content\" must be a string or a list of text parts, not {}",
             where, quoted(content));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    E3_REQUIRE(part.is_object() && part.contains("type") && part["type"].is_string(), ErrorKind::Input,
               "{}: content[{}] must be an object with a \"type\", not {}", where, i, quoted(part));
    const std::string type = part["type"].get<std::string>();
    E3_REQUIRE(type == "text", ErrorKind::Input,
               "{}: content[{}] is a \"{}\" part: only text is supported (the target is a text model)", where, i,
               clip(type, 40));
    E3_REQUIRE(part.contains("text") && part["text"].is_string(), ErrorKind::Input,
               "{}: content[{}] is a text part without a string \"text\"", where, i);
    text += part["text"].get<std::string>();
  }
  return text;
}

enum class Role { System, User, Assistant, Tool };
constexpr NamedValue<Role> kRoleNames[] = {
    {Role::System, "system"}, {Role::User, "user"}, {Role::Assistant, "assistant"}, {Role::Tool, "tool"}};
constexpr const auto& name_table(Role) { return kRoleNames; }

// ShareGPT's "from" values and the roles they stand for.
enum class From { System, Human, Gpt, Tool };
constexpr NamedValue<From> kFromNames[] = {
    {From::System, "system"}, {From::Human, "human"}, {From::Gpt, "gpt"}, {From::Tool, "tool"}};
constexpr const auto& name_table(From) { return kFromNames; }
constexpr Role role_of(From f) {
  switch (f) {
    case From::System: return Role::System;
    case From::Human: return Role::User;
    case From::Gpt: return Role::Assistant;
    case From::Tool: return Role::Tool;
  }
  return Role::User;
}

// Keys of a message besides role and content that chat templates read; passed through as given.
constexpr std::array<std::string_view, 6> kMessageKeys = {"role",       "content",      "name",
                                                          "tool_calls", "tool_call_id", "reasoning_content"};

json checked_message(const json& m, size_t i, const std::string& where) {
  const std::string at = fmt::format("{}: messages[{}]", where, i);
  E3_REQUIRE(m.is_object(), ErrorKind::Input, "{} must be an object {{\"role\", \"content\"}}, not {}", at, quoted(m));
  require_known_keys(m, {kMessageKeys.begin(), kMessageKeys.end()}, at, "a message");
  E3_REQUIRE(m.contains("role") && m["role"].is_string(), ErrorKind::Input, "{}: missing string \"role\"", at);
  const Role role = parse_named<Role>(m["role"].get<std::string>(), at + ": \"role\"", ErrorKind::Input);
  json out = m;
  out["role"] = std::string(name_of(role));
  // An assistant turn that only calls tools may have no content (OpenAI sends null).
  const bool tool_call_only = role == Role::Assistant && m.contains("tool_calls") && !m["tool_calls"].is_null();
  E3_REQUIRE(m.contains("content") || tool_call_only, ErrorKind::Input, "{}: missing \"content\"", at);
  // An absent content stays absent: templates test `message.content is defined`, and a null
  // inserted here would render as "None".
  if (!m.contains("content")) return out;
  out["content"] = content_of(m["content"], at);
  E3_REQUIRE(!out["content"].is_null() || tool_call_only, ErrorKind::Input,
             "{}: \"content\" is null (only an assistant message with tool_calls may have no content)", at);
  return out;
}

json message_of_turn(const json& t, size_t i, const std::string& where) {
  const std::string at = fmt::format("{}: conversations[{}]", where, i);
  E3_REQUIRE(t.is_object(), ErrorKind::Input, "{} must be an object {{\"from\", \"value\"}}, not {}", at, quoted(t));
  require_known_keys(t, {"from", "value"}, at, "a ShareGPT turn");
  E3_REQUIRE(t.contains("from") && t["from"].is_string(), ErrorKind::Input, "{}: missing string \"from\"", at);
  E3_REQUIRE(t.contains("value"), ErrorKind::Input, "{}: missing \"value\"", at);
  const From from = parse_named<From>(t["from"].get<std::string>(), at + ": \"from\"", ErrorKind::Input);
  json out = json::object();
  out["role"] = std::string(name_of(role_of(from)));
  out["content"] = content_of(t["value"], at);
  E3_REQUIRE(out["content"].is_string(), ErrorKind::Input, "{}: \"value\" is null", at);
  return out;
}

}  // namespace

void parse_line_id(const json& doc, const std::string& where, bool& has_id, std::string& id) {
  has_id = false;
  id.clear();
  if (!doc.contains("id") || doc["id"].is_null()) return;
  const json& v = doc["id"];
  E3_REQUIRE(v.is_string() || v.is_number_integer(), ErrorKind::Input, "{}: \"id\" must be a string, got {}", where,
             quoted(v));
  has_id = true;
  id = v.is_string() ? v.get<std::string>() : v.dump();
  E3_REQUIRE(id.size() <= kMaxIdBytes, ErrorKind::Input, "{}: \"id\" is {} bytes long, more than {} allowed", where,
             id.size(), kMaxIdBytes);
  if (const std::optional<size_t> at = control_character_at(id)) {
    const size_t bytes = static_cast<unsigned char>(id[*at]) == 0xC2 ? 2 : 1;
    E3_THROW(ErrorKind::Input,
             "{}: \"id\" \"{}\" holds the control character {} at byte {}: ids name samples in logs, shards and "
             "exported file names, so they must be printable text",
             where, clip(id, 80), printable(id.substr(*at, bytes)), *at + 1);
  }
}

LineKind line_kind(const json& doc, const std::string& where) {
  E3_REQUIRE(doc.is_object(), ErrorKind::Input, "{}: a sample must be a JSON object", where);
  const bool ids = doc.contains("input_ids"), messages = doc.contains("messages"),
             conversations = doc.contains("conversations"), text = doc.contains("text");
  const int kinds = int(ids) + int(messages) + int(conversations) + int(text);
  E3_REQUIRE(kinds <= 1, ErrorKind::Input,
             "{}: a line holds one of \"input_ids\", \"messages\", \"conversations\" or \"text\", not several", where);
  if (messages || conversations) return LineKind::Messages;
  if (text) return LineKind::Text;
  return LineKind::TokenIds;  // its own checks name a missing "input_ids" or a misspelt key
}

Conversation parse_conversation(const json& doc, const std::string& where) {
  Conversation c;
  const bool sharegpt = doc.contains("conversations");
  if (sharegpt)
    require_known_keys(doc, {"id", "conversations"}, where, "a ShareGPT line");
  else
    require_known_keys(doc, {"id", "messages", "tools", "chat_template_kwargs"}, where, "a messages line");
  parse_line_id(doc, where, c.has_id, c.id);
  const json& list = sharegpt ? doc["conversations"] : doc["messages"];
  const char* key = sharegpt ? "conversations" : "messages";
  E3_REQUIRE(list.is_array(), ErrorKind::Input, "{}: \"{}\" must be a list of {}", where, key,
             sharegpt ? "{\"from\", \"value\"} turns" : "{\"role\", \"content\"} messages");
  E3_REQUIRE(!list.empty(), ErrorKind::Input, "{}: empty conversation: \"{}\" has no turns", where, key);
  for (size_t i = 0; i < list.size(); ++i) {
    json m = sharegpt ? message_of_turn(list[i], i, where) : checked_message(list[i], i, where);
    if (m["role"] == "assistant") c.assistant.push_back(i);
    c.messages.push_back(std::move(m));
  }
  if (!sharegpt && doc.contains("tools") && !doc["tools"].is_null()) {
    E3_REQUIRE(doc["tools"].is_array(), ErrorKind::Input, "{}: \"tools\" must be a list of tool definitions", where);
    c.tools = doc["tools"];
  }
  if (!sharegpt && doc.contains("chat_template_kwargs") && !doc["chat_template_kwargs"].is_null()) {
    E3_REQUIRE(doc["chat_template_kwargs"].is_object(), ErrorKind::Input,
               "{}: \"chat_template_kwargs\" must be an object of template variables", where);
    c.template_kwargs = doc["chat_template_kwargs"];
  }
  return c;
}

std::string parse_text_line(const json& doc, const std::string& where, bool& has_id, std::string& id) {
  require_known_keys(doc, {"id", "text"}, where, "a text line");
  parse_line_id(doc, where, has_id, id);
  const json& t = doc["text"];
  E3_REQUIRE(t.is_string(), ErrorKind::Input, "{}: \"text\" must be a string, not {}", where, quoted(t));
  E3_REQUIRE(!t.get_ref<const std::string&>().empty(), ErrorKind::Input, "{}: empty sample: \"text\" is empty", where);
  return t.get<std::string>();
}

}  // namespace e3::io
