// The text kinds of a JSONL input line, checked and brought to one form before the chat template
// sees them: OpenAI messages, ShareGPT conversations (human -> user, gpt -> assistant) and plain
// text. Token-id lines are io/dataset.cpp's; this file only knows the lines that need a tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace e3::io {

enum class LineKind { TokenIds, Messages, Text };

// Which kind a parsed line is, from its keys: "input_ids" -> TokenIds, "messages" or
// "conversations" -> Messages, "text" -> Text. A line with none of them (or two) is an input
// error naming what it holds, `where` being "FILE:LINE".
LineKind line_kind(const nlohmann::ordered_json& doc, const std::string& where);

// One conversation as the template receives it.
struct Conversation {
  bool has_id = false;
  std::string id;
  // [{"role", "content", ...}]: every message has a string role among system, user, assistant
  // and tool, and a content that is a string (parts lists joined) or null; the other keys the
  // templates read (reasoning_content, tool_calls, tool_call_id, name) are kept as given.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;               // null when absent
  nlohmann::ordered_json template_kwargs;     // "chat_template_kwargs" (e.g. enable_thinking), null when absent
  std::vector<size_t> assistant;      // indices of the assistant messages, in order
};

// The conversation of a Messages line (OpenAI or ShareGPT), or the text of a Text line. Every
// problem is an input error "WHERE: what": unknown keys (with a suggestion), an unknown role or
// "from", content that is neither a string nor a list of text parts (an image part is named as
// such), an empty conversation.
Conversation parse_conversation(const nlohmann::ordered_json& doc, const std::string& where);
std::string parse_text_line(const nlohmann::ordered_json& doc, const std::string& where, bool& has_id, std::string& id);

// The "id" of a line (a string, or an integer written as its decimal text); absent or null gives
// has_id = false. Shared with the token-id lines, so that every kind names samples alike. An id
// over 4096 bytes or holding a control character (C0 such as NUL or newline, DEL, C1) is an
// input error.
void parse_line_id(const nlohmann::ordered_json& doc, const std::string& where, bool& has_id, std::string& id);

}  // namespace e3::io
