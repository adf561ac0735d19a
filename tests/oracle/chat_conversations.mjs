// The conversations the chat-template oracle renders with every template: the roles and shapes
// HF's chat templates meet (system or not, multi-turn, tools and tool calls as objects and as JSON
// text, tool results, reasoning as a field and inline, thinking switched off), text that tempts a
// template or a tokenizer (unicode, emoji, combining marks, whitespace at the edges, literal
// special tokens and template syntax inside content), and conversations a template refuses.

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city — returns °C, «quoted», and 天气.",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", description: "City name, e.g. \"Paris\"" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        days: { type: "integer", minimum: 1, maximum: 7 },
      },
      required: ["city"],
    },
  },
};
const searchTool = {
  type: "function",
  function: {
    name: "search",
    description: "Search the web.\nReturns a list of results.",
    parameters: { type: "object", properties: { query: { type: "string" }, limit: { type: "number" } }, required: ["query"] },
  },
};

export const conversations = [
  {
    id: "basic",
    messages: [
      { role: "system", content: "You are a helpful assistant." },
      { role: "user", content: "Hello! How are you?" },
      { role: "assistant", content: "I'm fine, thanks. How can I help?" },
      { role: "user", content: "Tell me a joke." },
    ],
  },
  {
    id: "no_system",
    messages: [
      { role: "user", content: "What is 2 + 2?" },
      { role: "assistant", content: "4" },
    ],
  },
  {
    id: "single_user",
    messages: [{ role: "user", content: "Write a haiku about the sea." }],
  },
  {
    id: "unicode",
    messages: [
      { role: "system", content: "  Réponds en français, s'il te plaît.  \n" },
      { role: "user", content: "日本語で答えて 🤖🎉 — naïve café, e\u0301, Ελληνικά, русский, עברית, العربية" },
      { role: "assistant", content: "\n  はい、わかりました！ 👍🏽 Ñandú ẞ ß ﬁ \u200b zero-width\t\n" },
      { role: "user", content: "\t\tTabs and\r\nCRLF and trailing spaces   " },
    ],
  },
  {
    id: "special_tokens_in_content",
    messages: [
      { role: "system", content: "Ignore <|im_end|> and <|eot_id|> tokens." },
      { role: "user", content: "Say </s> then [INST] then <|start_header_id|>user<|end_header_id|> and <｜end▁of▁sentence｜>." },
      { role: "assistant", content: "Here: </s> [/INST] <|im_start|>assistant <|im_end|> {{ not_a_template }} {% if x %} {# c #}" },
      { role: "user", content: "<tool_response>fake</tool_response> and <think>not really</think> and [gMASK]<sop>" },
    ],
  },
  {
    id: "reasoning_field",
    messages: [
      { role: "user", content: "What is 17 * 23?" },
      { role: "assistant", reasoning_content: "17 * 23 = 17 * 20 + 17 * 3 = 340 + 51 = 391.", content: "391" },
      { role: "user", content: "And 391 / 17?" },
      { role: "assistant", reasoning_content: "\nIt is 23 because 17 * 23 = 391.\n", content: "\n23" },
    ],
  },
  {
    id: "reasoning_inline",
    messages: [
      { role: "system", content: "Think step by step." },
      { role: "user", content: "Is 97 prime?" },
      { role: "assistant", content: "<think>\nCheck divisors up to 9: 2, 3, 5, 7 do not divide 97.\n</think>\n\nYes, 97 is prime." },
      { role: "user", content: "Is 91 prime?" },
      { role: "assistant", content: "<think>\n91 = 7 * 13.\n</think>\n\nNo: 91 = 7 × 13." },
    ],
  },
  {
    id: "tools_objects",
    tools: [weatherTool, searchTool],
    messages: [
      { role: "system", content: "You can call tools." },
      { role: "user", content: "What's the weather in Paris and in 東京?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { id: "call12345", type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "celsius" } } },
          { id: "call67890", type: "function", function: { name: "get_weather", arguments: { city: "東京", days: 2 } } },
        ],
      },
      { role: "tool", tool_call_id: "call12345", name: "get_weather", content: "{\"temperature\": 18, \"sky\": \"cloudy\"}" },
      { role: "tool", tool_call_id: "call67890", name: "get_weather", content: "晴れ, 22°C" },
      { role: "assistant", content: "Paris: 18 °C and cloudy. Tokyo: sunny, 22 °C." },
    ],
  },
  {
    id: "tools_string_arguments",
    tools: [weatherTool],
    messages: [
      { role: "user", content: "Weather in Berlin?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "abcdefghi", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Berlin\"}" } }],
      },
      { role: "tool", tool_call_id: "abcdefghi", content: "{\"temperature\": 12}" },
      { role: "assistant", content: "It is 12 °C in Berlin." },
    ],
  },
  {
    id: "tools_single_call",
    tools: [searchTool],
    messages: [
      { role: "system", content: "Use the search tool when needed." },
      { role: "user", content: "Find the tallest mountain." },
      {
        role: "assistant",
        tool_calls: [{ id: "search001", type: "function", function: { name: "search", arguments: { query: "tallest mountain", limit: 3 } } }],
      },
      { role: "tool", tool_call_id: "search001", content: "Mount Everest, 8849 m" },
    ],
  },
  {
    id: "tools_no_call",
    tools: [weatherTool],
    messages: [
      { role: "user", content: "Just say hi." },
      { role: "assistant", content: "Hi!" },
    ],
  },
  {
    id: "thinking_off",
    extra: { enable_thinking: false },
    messages: [
      { role: "user", content: "Quick: capital of Italy?" },
      { role: "assistant", content: "Rome." },
      { role: "user", content: "And of Spain?" },
    ],
  },
  {
    id: "thinking_on",
    extra: { enable_thinking: true, thinking: true },
    messages: [{ role: "user", content: "Explain recursion briefly." }],
  },
  {
    id: "empty_and_whitespace",
    messages: [
      { role: "user", content: "" },
      { role: "assistant", content: "   " },
      { role: "user", content: "\n" },
    ],
  },
  {
    id: "not_alternating",
    messages: [
      { role: "user", content: "First question." },
      { role: "user", content: "Second question." },
    ],
  },
  {
    id: "system_twice",
    messages: [
      { role: "system", content: "Rule one." },
      { role: "system", content: "Rule two." },
      { role: "user", content: "Which rules?" },
    ],
  },
  {
    id: "named_roles",
    messages: [
      { role: "system", content: "Two users talk to you." },
      { role: "user", name: "alice", content: "Hi, I'm Alice." },
      { role: "assistant", name: "helper", content: "Hello Alice." },
      { role: "user", name: "bob", content: "And I'm Bob." },
    ],
  },
  {
    id: "long",
    messages: [{ role: "system", content: "Be brief." }].concat(
      Array.from({ length: 24 }, (_, k) =>
        k % 2 === 0
          ? { role: "user", content: `Question ${k / 2}: what is ${k} squared? Explain with some words: ${"lorem ipsum ".repeat(k)}` }
          : { role: "assistant", content: `${(k - 1) * (k - 1)}. ${"Because arithmetic. ".repeat(k)}` },
      ),
    ),
  },
];
