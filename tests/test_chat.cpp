// The chat input (issue 19): the line kinds and their checks, the loss mask from character spans,
// and the encoder end to end on the tiny byte-level tokenizer of tests/data/chat/tiny_tokenizer
// (its ChatML template trims the content, writes reasoning in <think> and tool calls as JSON).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "io/chat_encoder.h"
#include "io/chat_input.h"
#include "io/dataset.h"
#include "support/test_support.h"

namespace e3::io {
namespace {

using json = nlohmann::ordered_json;
using test::error_of;
using test::TempDir;

using test::Contains;

const std::filesystem::path kTinyTokenizer = std::filesystem::path(E3_CHAT_TEST_DATA) / "tiny_tokenizer";

std::string input_error(const std::function<void()>& f) {
  auto err = error_of(f);
  if (!err) return "(no error)";
  EXPECT_EQ(err->kind(), ErrorKind::Input) << err->what();
  return err->what();
}

Conversation conversation(const std::string& line) { return parse_conversation(json::parse(line), "d.jsonl:7"); }

TEST(ChatInput, LineKindsFromTheirKeys) {
  EXPECT_EQ(line_kind(json::parse(R"({"input_ids": [1]})"), "w"), LineKind::TokenIds);
  EXPECT_EQ(line_kind(json::parse(R"({"messages": []})"), "w"), LineKind::Messages);
  EXPECT_EQ(line_kind(json::parse(R"({"conversations": []})"), "w"), LineKind::Messages);
  EXPECT_EQ(line_kind(json::parse(R"({"text": "x"})"), "w"), LineKind::Text);
  EXPECT_TRUE(Contains(input_error([] { line_kind(json::parse(R"({"text": "x", "messages": []})"), "d.jsonl:3"); }), "d.jsonl:3: a line holds one of"));
  EXPECT_TRUE(Contains(input_error([] { line_kind(json::parse("[1]"), "d.jsonl:3"); }), "must be a JSON object"));
}

TEST(ChatInput, OpenAiMessagesKeepTheKeysTemplatesRead) {
  const Conversation c = conversation(
      R"({"id": 12, "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u", "name": "ann"},)"
      R"( {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]},)"
      R"( {"role": "tool", "content": "42", "tool_call_id": "c1"}, {"role": "assistant", "content": "ok", "reasoning_content": "r"}],)"
      R"( "tools": [{"type": "function"}], "chat_template_kwargs": {"enable_thinking": false}})");
  EXPECT_TRUE(c.has_id);
  EXPECT_EQ(c.id, "12");
  ASSERT_EQ(c.messages.size(), 5u);
  EXPECT_EQ(c.assistant, (std::vector<size_t>{2, 4}));
  EXPECT_EQ(c.messages[1]["name"], "ann");
  EXPECT_TRUE(c.messages[2]["content"].is_null());  // given as null: kept
  const Conversation absent = conversation(
      R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "tool_calls": [{"type": "function"}]}]})");
  EXPECT_FALSE(absent.messages[1].contains("content"));  // not given: not invented
  EXPECT_EQ(c.messages[3]["tool_call_id"], "c1");
  EXPECT_EQ(c.messages[4]["reasoning_content"], "r");
  EXPECT_EQ(c.tools.size(), 1u);
  EXPECT_EQ(c.template_kwargs["enable_thinking"], false);
}

TEST(ChatInput, ShareGptTurnsBecomeMessages) {
  const Conversation c = conversation(
      R"({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}, {"from": "tool", "value": "t"}]})");
  EXPECT_FALSE(c.has_id);
  ASSERT_EQ(c.messages.size(), 4u);
  EXPECT_EQ(c.messages[0]["role"], "system");
  EXPECT_EQ(c.messages[1]["role"], "user");
  EXPECT_EQ(c.messages[2]["role"], "assistant");
  EXPECT_EQ(c.messages[2]["content"], "a");
  EXPECT_EQ(c.messages[3]["role"], "tool");
  EXPECT_EQ(c.assistant, (std::vector<size_t>{2}));
}

TEST(ChatInput, TextPartsAreJoinedAndImagesRefused) {
  const Conversation c = conversation(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  EXPECT_EQ(c.messages[0]["content"], "ab");
  EXPECT_TRUE(Contains(input_error([] {
                conversation(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})");
              }), "d.jsonl:7: messages[0]: content[0] is a \"image_url\" part: only text is supported"));
}

TEST(ChatInput, BadMessagesNameTheLineTheMessageAndTheFix) {
  struct Case {
    const char* line;
    const char* message;
  };
  const Case cases[] = {
      {R"({"messages": [{"role": "asistant", "content": "x"}]})", "messages[0]: \"role\""},
      {R"({"messages": [{"role": "asistant", "content": "x"}]})", "did you mean 'assistant'?"},
      {R"({"messages": [{"role": "user", "contnet": "x"}]})", "unknown key \"contnet\" in a message: did you mean \"content\"?"},
      {R"({"messages": [{"role": "user"}]})", "messages[0]: missing \"content\""},
      {R"({"messages": [{"role": "user", "content": null}]})", "\"content\" is null"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "\"content\" must be a string or a list of text parts"},
      {R"({"messages": [{"content": "x"}]})", "missing string \"role\""},
      {R"({"messages": []})", "empty conversation"},
      {R"({"messages": {"role": "user"}})", "\"messages\" must be a list"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "\"tools\" must be a list"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool": []})", "did you mean \"tools\"?"},
      {R"({"conversations": [{"from": "humam", "value": "x"}]})", "did you mean 'human'?"},
      {R"({"conversations": [{"from": "human", "text": "x"}]})", "unknown key \"text\" in a ShareGPT turn"},
      {R"({"conversations": [{"from": "gpt", "value": null}]})", "\"value\" is null"},
      {R"({"conversations": [{"from": "gpt", "value": "x"}], "messages": []})", "unknown key \"messages\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    const std::string what = input_error([&] { conversation(c.line); });
    EXPECT_TRUE(Contains(what, "d.jsonl:7: "));
    EXPECT_TRUE(Contains(what, c.message));
  }
}

TEST(ChatInput, TextLines) {
  bool has_id = false;
  std::string id;
  EXPECT_EQ(parse_text_line(json::parse(R"({"id": "t", "text": "hi"})"), "w", has_id, id), "hi");
  EXPECT_TRUE(has_id);
  EXPECT_EQ(id, "t");
  EXPECT_TRUE(Contains(input_error([&] { parse_text_line(json::parse(R"({"text": ""})"), "w:1", has_id, id); }), "w:1: empty sample"));
  EXPECT_TRUE(Contains(input_error([&] { parse_text_line(json::parse(R"({"text": 3})"), "w:1", has_id, id); }), "\"text\" must be a string"));
  EXPECT_TRUE(Contains(input_error([&] { parse_text_line(json::parse(R"({"text": "x", "txt": 1})"), "w:1", has_id, id); }), "unknown key \"txt\""));
}

// Every kind of line takes its id through parse_line_id, and refuses control characters alike.
TEST(ChatInput, IdsWithControlCharactersAreRefusedInEveryKind) {
  bool has_id = false;
  std::string id;
  EXPECT_TRUE(Contains(input_error([&] { parse_text_line(json::parse(R"({"id": "a\u0000b", "text": "hi"})"), "w:1", has_id, id); }),
                       R"(w:1: "id" "a\u0000b" holds the control character \u0000 at byte 2)"));
  EXPECT_TRUE(Contains(input_error([&] { conversation(R"({"id": "x\ny", "messages": [{"role": "user", "content": "hi"}]})"); }),
                       R"(d.jsonl:7: "id" "x\ny" holds the control character \n at byte 2)"));
  EXPECT_TRUE(Contains(input_error([&] { conversation(R"({"id": "\u001b[2J", "conversations": [{"from": "human", "value": "hi"}]})"); }),
                       R"("id" "\u001b[2J" holds the control character \u001b at byte 1)"));
}

// Tokens over a text, by byte ranges: mask_from_spans sees only ranges and ids.
std::vector<tok::Token> tokens_at(const std::vector<std::tuple<int32_t, uint32_t, uint32_t>>& t) {
  std::vector<tok::Token> out;
  for (const auto& [id, b, e] : t) out.push_back({id, b, e});
  return out;
}

TEST(MaskFromSpans, CoversOverlappingTokensAndTheEndOfTurnAfterTheReply) {
  // "H: hi<E>A: yo<E>" with the reply "yo" at [10, 12) and <E> (id 9) the end of turn.
  const std::string text = "H: hi<E>A: yo<E>";
  const auto tokens = tokens_at({{1, 0, 3}, {2, 3, 5}, {9, 5, 8}, {3, 8, 11}, {4, 11, 13}, {9, 13, 16}});
  // The token "A: y" [8, 11) overlaps the reply: trained on, as HF's offsets make it.
  EXPECT_EQ(mask_from_spans(tokens, {{10, 13}}, {9}, text), (std::vector<uint8_t>{0, 0, 0, 1, 1, 1}));
  // Without an end-of-turn id nothing past the reply.
  EXPECT_EQ(mask_from_spans(tokens, {{10, 13}}, {}, text), (std::vector<uint8_t>{0, 0, 0, 1, 1, 0}));
}

TEST(MaskFromSpans, ALiteralEndTokenInsideTheReplyDoesNotEndIt) {
  // The reply "a<E>b" at [0, 5): its own <E> is content; the template's <E> follows at [5, 8).
  const std::string text = "a<E>b<E><H>";
  const auto tokens = tokens_at({{1, 0, 1}, {9, 1, 4}, {2, 4, 5}, {9, 5, 8}, {7, 8, 11}});
  EXPECT_EQ(mask_from_spans(tokens, {{0, 5}}, {9}, text), (std::vector<uint8_t>{1, 1, 1, 1, 0}));
}

TEST(MaskFromSpans, TheNextHeaderIsNotAnEndToken) {
  const std::string text = "ab<H>user";
  const auto tokens = tokens_at({{1, 0, 2}, {7, 2, 5}, {3, 5, 9}});
  EXPECT_EQ(mask_from_spans(tokens, {{0, 2}}, {9}, text), (std::vector<uint8_t>{1, 0, 0}));
}

TEST(MaskFromSpans, WhitespaceBeforeTheEndTokenIsTakenOnlyWithIt) {
  // Llama-2 writes " </s>" after the reply: the blank token goes with the end token...
  const std::string text = "ok </s>[INST] q";
  const auto tokens = tokens_at({{1, 0, 2}, {5, 2, 3}, {9, 3, 7}, {6, 7, 13}, {5, 13, 14}, {2, 14, 15}});
  EXPECT_EQ(mask_from_spans(tokens, {{0, 2}}, {9}, text), (std::vector<uint8_t>{1, 1, 1, 0, 0, 0}));
  // ...and stays 0 when no end token follows it.
  const std::string other = "ok [INST]";
  const auto t2 = tokens_at({{1, 0, 2}, {5, 2, 3}, {6, 3, 9}});
  EXPECT_EQ(mask_from_spans(t2, {{0, 2}}, {9}, other), (std::vector<uint8_t>{1, 0, 0}));
}

class ChatEncoderTest : public ::testing::Test {
 protected:
  std::shared_ptr<const ChatEncoder> encoder(MaskMode mode = MaskMode::Assistant, std::filesystem::path tmpl = {}) {
    ChatOptions o;
    o.tokenizer_dir = kTinyTokenizer;
    o.chat_template = std::move(tmpl);
    o.mask = mode;
    o.now = default_template_time();
    return ChatEncoder::load(o);
  }
  // The text of the tokens with mask 1, runs separated by '|'.
  static std::string trained_text(const ChatEncoder& e, const EncodedSample& s) {
    std::string out;
    bool in = false;
    for (size_t k = 0; k < s.ids.size(); ++k) {
      if (s.mask[k] && !in && !out.empty()) out += '|';
      in = s.mask[k] != 0;
      if (in) out += e.tokenizer().token_bytes(s.ids[k]);
    }
    return out;
  }
  static std::string all_text(const ChatEncoder& e, const EncodedSample& s) {
    std::string out;
    for (int32_t id : s.ids) out += e.tokenizer().token_bytes(id);
    return out;
  }
  EncodedSample encode(const ChatEncoder& e, const std::string& line) {
    const json doc = json::parse(line);
    return e.encode(doc, line_kind(doc, "d.jsonl:1"), "d.jsonl:1", /*keep_text=*/true);
  }
  TempDir dir_;
};

constexpr const char* kTwoTurns =
    R"({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},)"
    R"( {"role": "assistant", "content": " hello there "}, {"role": "user", "content": "and?"},)"
    R"( {"role": "assistant", "content": "bye", "reasoning_content": "think"}]})";

TEST_F(ChatEncoderTest, TheMaskIsTheRepliesAsRenderedAndTheirEndOfTurn) {
  const auto e = encoder();
  const EncodedSample s = encode(*e, kTwoTurns);
  ASSERT_EQ(s.ids.size(), s.mask.size());
  EXPECT_EQ(all_text(*e, s),
            "<|begin_of_text|><|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\nhello there<|im_end|>\n<|im_start|>user\nand?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nthink\n</think>\n\nbye<|im_end|>\n");
  // The template trims " hello there ": what is trained on is the reply as rendered.
  const std::string trained = trained_text(*e, s);
  EXPECT_NE(trained.find("hello there<|im_end|>"), std::string::npos) << trained;
  EXPECT_NE(trained.find("think"), std::string::npos) << trained;
  EXPECT_NE(trained.find("bye<|im_end|>"), std::string::npos) << trained;
  EXPECT_EQ(trained.find("user"), std::string::npos) << trained;
  EXPECT_EQ(trained.find("brief"), std::string::npos) << trained;
  EXPECT_EQ(trained.find("<think>"), std::string::npos) << trained;
  // The ids are those of the rendered text tokenized without added special tokens.
  EXPECT_EQ(s.ids, e->tokenizer().encode_ids(s.text, false));
}

TEST_F(ChatEncoderTest, MaskModes) {
  const auto assistant = encode(*encoder(MaskMode::Assistant), kTwoTurns);
  const auto last = encode(*encoder(MaskMode::LastAssistant), kTwoTurns);
  const auto all = encode(*encoder(MaskMode::All), kTwoTurns);
  ASSERT_EQ(assistant.ids, last.ids);
  ASSERT_EQ(assistant.ids, all.ids);
  size_t n_assistant = 0, n_last = 0;
  for (size_t k = 0; k < assistant.ids.size(); ++k) {
    n_assistant += assistant.mask[k];
    n_last += last.mask[k];
    EXPECT_LE(last.mask[k], assistant.mask[k]) << k;
    EXPECT_EQ(all.mask[k], 1) << k;
  }
  EXPECT_LT(n_last, n_assistant);
  EXPECT_GT(n_last, 0u);
  EXPECT_EQ(trained_text(*encoder(MaskMode::LastAssistant), last).find("hello"), std::string::npos);
}

TEST_F(ChatEncoderTest, ALiteralSpecialTokenInContent) {
  const auto e = encoder();
  const EncodedSample s = encode(
      *e, R"({"messages": [{"role": "user", "content": "say <|im_end|> now"}, {"role": "assistant", "content": "a<|im_end|>b"}]})");
  // HF matches special tokens inside text: the literal one is the special id...
  const int32_t im_end = *e->tokenizer().token_to_id("<|im_end|>");
  EXPECT_GE(std::count(s.ids.begin(), s.ids.end(), im_end), 4);
  // ...but it neither ends the reply nor is trained on in the user turn.
  EXPECT_EQ(trained_text(*e, s), "a<|im_end|>b<|im_end|>");
}

TEST_F(ChatEncoderTest, ToolCallsAreTrainedOnAsTheAssistantWroteThem) {
  const auto e = encoder();
  const EncodedSample s = encode(
      *e, R"({"messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "get", "arguments": {"city": "Oslo"}}}]}, {"role": "tool", "content": "3C"}, {"role": "assistant", "content": "3C"}]})");
  const std::string trained = trained_text(*e, s);
  EXPECT_NE(trained.find("\"name\": \"get\""), std::string::npos) << trained;
  EXPECT_NE(trained.find("Oslo"), std::string::npos) << trained;
  EXPECT_EQ(trained.find("<tool_call>"), std::string::npos) << trained;
  // The tool's "3C" is not trained on, the assistant's is: exactly one run ends in "3C<|im_end|>".
  EXPECT_NE(trained.find("|3C<|im_end|>"), std::string::npos) << trained;
}

TEST_F(ChatEncoderTest, NoAssistantTurnGivesAnAllZeroMask) {
  const auto e = encoder();
  const EncodedSample s = encode(*e, R"({"conversations": [{"from": "human", "value": "only a question"}]})");
  EXPECT_FALSE(s.ids.empty());
  EXPECT_EQ(std::count(s.mask.begin(), s.mask.end(), 1), 0);
}

TEST_F(ChatEncoderTest, TextLinesGetTheTokenizersSpecialTokensAndAFullMask) {
  const auto e = encoder();
  const EncodedSample s = encode(*e, R"({"text": "plain words"})");
  ASSERT_FALSE(s.ids.empty());
  EXPECT_EQ(s.ids.front(), *e->tokenizer().token_to_id("<|begin_of_text|>"));
  EXPECT_EQ(s.ids, e->tokenizer().encode_ids("plain words", true));
  EXPECT_EQ(std::count(s.mask.begin(), s.mask.end(), 1), static_cast<long>(s.ids.size()));
}

TEST_F(ChatEncoderTest, ATemplateThatRaisesNamesTheDataLineAndTheTemplateLine) {
  const auto path = dir_.path() / "strict.jinja";
  std::ofstream(path) << "{%- for m in messages %}\n"
                         "{%- if m.role == 'system' %}{{ raise_exception('no system messages, please') }}{% endif %}\n"
                         "{{- m.content }}{%- endfor %}";
  const auto e = encoder(MaskMode::Assistant, path);
  const std::string what = input_error([&] {
    encode(*e, R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})");
  });
  EXPECT_TRUE(Contains(what, "d.jsonl:1: "));
  EXPECT_TRUE(Contains(what, "strict.jinja:2"));
  EXPECT_TRUE(Contains(what, "no system messages, please"));
}

TEST_F(ChatEncoderTest, ATemplateThatDoesNotParseIsAnErrorAtLoad) {
  const auto path = dir_.path() / "broken.jinja";
  std::ofstream(path) << "ok\n{% for m in messages %}{{ m.content }}\n";
  const std::string what = input_error([&] { encoder(MaskMode::Assistant, path); });
  EXPECT_TRUE(Contains(what, "broken.jinja:"));
}

TEST_F(ChatEncoderTest, TheFingerprintFollowsTemplateAndMask) {
  const auto path = dir_.path() / "other.jinja";
  std::ofstream(path) << "{% for m in messages %}{{ m.content }}{% endfor %}";
  EXPECT_EQ(encoder()->fingerprint(), encoder()->fingerprint());
  EXPECT_NE(encoder()->fingerprint(), encoder(MaskMode::All)->fingerprint());
  EXPECT_NE(encoder()->fingerprint(), encoder(MaskMode::Assistant, path)->fingerprint());
}

TEST_F(ChatEncoderTest, EncodesFromSeveralThreadsAlike) {
  const auto e = encoder();
  const EncodedSample want = encode(*e, kTwoTurns);
  std::vector<EncodedSample> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) got[t] = encode(*e, kTwoTurns);
    });
  for (auto& t : threads) t.join();
  for (const auto& g : got) {
    EXPECT_EQ(g.ids, want.ids);
    EXPECT_EQ(g.mask, want.mask);
  }
}

TEST_F(ChatEncoderTest, DatasetMixesKindsAndCountsAllZeroMasks) {
  const auto path = dir_.path() / "mixed.jsonl";
  std::ofstream(path) << R"({"id": "t", "input_ids": [5, 6, 7]})" "\n"
                      << kTwoTurns << "\n"
                      << R"({"conversations": [{"from": "human", "value": "no reply"}]})" "\n"
                      << R"({"text": "some text"})" "\n";
  DatasetOptions o;
  o.vocab_size = 1024;  // the tiny tokenizer's special tokens are 500 and up
  o.max_seq_len = 4096;
  o.threads = 2;
  const auto e = encoder();
  o.load_chat = [&] { return e; };
  const Dataset ds = Dataset::open(path, o);
  ASSERT_EQ(ds.samples().size(), 4u);
  EXPECT_EQ(ds.num_text_lines(), 3);
  EXPECT_EQ(ds.num_mask_all_zero(), 1);
  EXPECT_TRUE(ds.samples()[2].mask_all_zero);
  EXPECT_EQ(ds.samples()[1].kind, LineKind::Messages);
  EXPECT_EQ(ds.samples()[3].kind, LineKind::Text);
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  ds.read(ds.samples()[1], ids, mask);
  const EncodedSample want = encode(*e, kTwoTurns);
  EXPECT_EQ(ids, want.ids);
  EXPECT_EQ(mask, want.mask);
  EXPECT_EQ(ds.samples()[1].num_tokens, static_cast<int64_t>(want.ids.size()));
}

TEST_F(ChatEncoderTest, AConversationOverTheLengthLimitFollowsOnLong) {
  const auto path = dir_.path() / "long.jsonl";
  std::ofstream(path) << kTwoTurns << "\n";
  DatasetOptions o;
  o.vocab_size = 1024;  // the tiny tokenizer's special tokens are 500 and up
  o.max_seq_len = 8;
  o.on_long = OnLong::Error;
  const auto e = encoder();
  o.load_chat = [&] { return e; };
  const std::string what = input_error([&] { Dataset::open(path, o); });
  EXPECT_TRUE(Contains(what, path.string() + ":1: "));
  o.on_long = OnLong::Truncate;
  const Dataset ds = Dataset::open(path, o);
  EXPECT_EQ(ds.samples()[0].num_tokens, 8);
  EXPECT_EQ(ds.num_truncated(), 1);
}

}  // namespace
}  // namespace e3::io
