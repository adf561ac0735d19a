// io/tokenizer on small hand-made tokenizer.json files: each normalizer, pre-tokenizer and split
// behaviour, the BPE model's byte fallback / unk / ignore_merges, added tokens, offsets,
// post-processors, tokenizer_config.json, tiktoken.model, threads and errors. The real tokenizers
// are compared with HF's own implementation by the tokenizer_oracle test.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/tokenizer/bpe.h"
#include "io/tokenizer/regex.h"
#include "io/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using e3::tok::Token;
using e3::tok::Tokenizer;

namespace {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("e3_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path_ / name) << text; }

 private:
  fs::path path_;
};

// A BPE tokenizer.json whose vocab lists `tokens` in id order.
json bpe_json(const std::vector<std::string>& tokens, const std::vector<std::string>& merges = {}) {
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", merges}}}};
}

Tokenizer load(const TempDir& dir, const json& tokenizer, const json& config = nullptr) {
  dir.write("tokenizer.json", tokenizer.dump());
  if (!config.is_null()) dir.write("tokenizer_config.json", config.dump());
  return Tokenizer::load(dir.path());
}

std::vector<int32_t> ids(const Tokenizer& t, std::string_view text, bool special = false) {
  return t.encode_ids(text, special);
}

std::vector<std::pair<uint32_t, uint32_t>> offsets(const Tokenizer& t, std::string_view text, bool special = false) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const Token& tok : t.encode(text, special)) out.emplace_back(tok.begin, tok.end);
  return out;
}

using Offsets = std::vector<std::pair<uint32_t, uint32_t>>;
using Ids = std::vector<int32_t>;

// GPT-2's byte alphabet as vocab ids 0..255 (id = byte), then `extra`.
json byte_level_json(const std::vector<std::string>& extra, const std::vector<std::string>& merges) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(e3::tok::byte_to_char_utf8(static_cast<unsigned char>(b)));
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  json j = bpe_json(tokens, merges);
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  return j;
}

}  // namespace

TEST(Tokenizer, ByteLevelMergesByRankWithOffsets) {
  TempDir dir;
  const auto t = load(dir, byte_level_json({"He", "ll", "Hell", "\u0120w"}, {"H e", "l l", "He ll", "\u0120 w"}));
  EXPECT_EQ(ids(t, "Hello world"), (Ids{258, 'o', 259, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(offsets(t, "Hello world"), (Offsets{{0, 4}, {4, 5}, {5, 7}, {7, 8}, {8, 9}, {9, 10}, {10, 11}}));
  // A character cut between tokens: both tokens cover the whole character.
  EXPECT_EQ(ids(t, "\xC3\xA9"), (Ids{0xC3, 0xA9}));
  EXPECT_EQ(offsets(t, "x\xC3\xA9"), (Offsets{{0, 1}, {1, 3}, {1, 3}}));
  EXPECT_EQ(offsets(t, "\xC3\xA9"), (Offsets{{0, 2}, {0, 2}}));
  EXPECT_EQ(t.token_bytes(259), " w");
  EXPECT_EQ(t.token_bytes(0xC3), "\xC3");
  EXPECT_EQ(t.vocab_size(), 260);
  EXPECT_TRUE(ids(t, "").empty());
}

TEST(Tokenizer, ByteLevelPrefixSpaceAndTrimmedOffsets) {
  TempDir dir;
  json j = byte_level_json({"\u0120w"}, {"\u0120 w"});
  j["pre_tokenizer"]["add_prefix_space"] = true;
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}};
  const auto t = load(dir, j);
  // "w" gains a space, which takes w's offsets; "a" gains one too (not merged with it), and the
  // prefix space's offsets are trimmed away to an empty range at a's start.
  EXPECT_EQ(ids(t, "w"), (Ids{256}));
  EXPECT_EQ(offsets(t, "w"), (Offsets{{0, 1}}));
  EXPECT_EQ(ids(t, "a w"), (Ids{' ', 'a', 256}));  // as @huggingface/tokenizers gives
  const Offsets got = offsets(t, "a w");
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[1], std::make_pair(0u, 1u));
  EXPECT_EQ(got[2], std::make_pair(2u, 3u));  // " w": its space trimmed
}

TEST(Tokenizer, ByteFallbackPrependReplaceLikeLlama2) {
  TempDir dir;
  std::vector<std::string> tokens{"<unk>"};
  for (int b = 0; b < 256; ++b) tokens.push_back(fmt::format("<0x{:02X}>", b));
  for (const char* s : {"\u2581", "a", "b", "\u2581a"}) tokens.push_back(s);  // 257..260
  json j = bpe_json(tokens, {"\u2581 a"});
  j["model"]["byte_fallback"] = true;
  j["model"]["unk_token"] = "<unk>";
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  j["decoder"] = {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}};
  const auto t = load(dir, j);
  const std::string text = "a b\xE2\x82\xAC";  // "a b€"
  EXPECT_EQ(ids(t, text), (Ids{260, 257, 259, 1 + 0xE2, 1 + 0x82, 1 + 0xAC}));
  EXPECT_EQ(offsets(t, text), (Offsets{{0, 1}, {1, 2}, {2, 3}, {3, 6}, {3, 6}, {3, 6}}));
  EXPECT_EQ(t.token_bytes(260), " a");
  EXPECT_EQ(t.token_bytes(1 + 0xE2), "\xE2");
}

TEST(Tokenizer, UnknownCharactersFuseIntoOneUnk) {
  TempDir dir;
  json j = bpe_json({"<unk>", "a"});
  j["model"]["unk_token"] = "<unk>";
  j["model"]["fuse_unk"] = true;
  EXPECT_EQ(ids(load(dir, j), "xyaz"), (Ids{0, 1, 0}));
  TempDir dir2;
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(ids(load(dir2, j), "xyaz"), (Ids{0, 0, 1, 0}));
  TempDir dir3;
  j["model"]["unk_token"] = nullptr;
  EXPECT_EQ(ids(load(dir3, j), "xyaz"), (Ids{1}));  // HF drops what it cannot spell
}

TEST(Tokenizer, IgnoreMergesTakesWholeWordsFromTheVocab) {
  TempDir dir;
  // Merging would give "ab" + "c"; the whole word is in the vocab.
  json j = bpe_json({"a", "b", "c", "ab", "abc", "bc"}, {"a b", "b c"});
  EXPECT_EQ(ids(load(dir, j), "abc"), (Ids{3, 2}));
  TempDir dir2;
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(ids(load(dir2, j), "abc"), (Ids{4}));
}

TEST(Tokenizer, MergesInPairFormAndPrefixSuffix) {
  TempDir dir;
  json j = bpe_json({"a", "##b", "ab", "c</w>", "##c</w>", "b"}, {});
  j["model"]["merges"] = json::array({json::array({"a", "##b"})});
  j["model"]["continuing_subword_prefix"] = "##";
  j["model"]["end_of_word_suffix"] = "</w>";
  const auto t = load(dir, j);
  // "##b</w>" (b is the word's last) is not in the vocab and there is no unk: HF drops it.
  EXPECT_EQ(ids(t, "ab"), (Ids{0}));
  EXPECT_EQ(ids(t, "abc"), (Ids{2, 4}));
  EXPECT_EQ(ids(t, "c"), (Ids{3}));
}

TEST(Tokenizer, LongWordsMergeLikeShortOnes) {
  TempDir dir;
  const auto t = load(dir, bpe_json({"a", "aa", "aaaa"}, {"a a", "aa aa"}));
  EXPECT_EQ(ids(t, "aaaaa"), (Ids{2, 0}));
  // Past the short-word scan: the heap gives the same leftmost-lowest-rank order.
  const auto long_ids = ids(t, std::string(10001, 'a'));
  ASSERT_EQ(long_ids.size(), 2501u);
  for (size_t i = 0; i < 2500; ++i) ASSERT_EQ(long_ids[i], 2);
  EXPECT_EQ(long_ids.back(), 0);
}

TEST(Tokenizer, WordCacheOffGivesTheSameTokens) {
  TempDir dir;
  const json j = byte_level_json({"He", "ll", "Hell", "\u0120w"}, {"H e", "l l", "He ll", "\u0120 w"});
  const auto cached = load(dir, j);
  dir.write("tokenizer.json", j.dump());
  const auto uncached = Tokenizer::load(dir.path(), e3::tok::LoadOptions{.word_cache = false});
  const std::string text = "Hello world Hello  world\nHello wHello";
  for (int pass = 0; pass < 2; ++pass) {  // the second pass finds the words in the cache
    EXPECT_EQ(offsets(cached, text), offsets(uncached, text));
    EXPECT_EQ(ids(cached, text), ids(uncached, text));
  }
}

TEST(Tokenizer, LongWordsMergeInRankOrderWhenAMergeMakesALowerRank) {
  // "ab c" (rank 0) only becomes possible after "a b" (rank 1): the long-word queue, which takes
  // ranks in rising order, must hand over to a heap and still merge as the short-word scan does.
  TempDir dir;
  const auto t = load(dir, bpe_json({"a", "b", "c", "ab", "abc", "ca"}, {"ab c", "a b", "c a"}));
  const Ids one = ids(t, "abcab");
  EXPECT_EQ(one, (Ids{4, 3}));
  std::string word;
  for (int i = 0; i < 30; ++i) word += "abc";
  word += "ab";
  const auto long_ids = ids(t, word);
  // "c a" (rank 2) never wins: every c is taken by "ab c" first.
  ASSERT_EQ(long_ids.size(), 31u);
  for (size_t i = 0; i < 30; ++i) ASSERT_EQ(long_ids[i], 4);
  EXPECT_EQ(long_ids.back(), 3);
}

// ---- normalizers

namespace {

Tokenizer chars_with(const TempDir& dir, const std::vector<std::string>& tokens, const json& normalizer,
                     const json& pre_tokenizer = nullptr) {
  json j = bpe_json(tokens);
  j["normalizer"] = normalizer;
  j["pre_tokenizer"] = pre_tokenizer;
  j["model"]["ignore_merges"] = true;
  return load(dir, j);
}

}  // namespace

TEST(Tokenizer, UnicodeNormalForms) {
  TempDir a, b, c, d;
  // é precomposed (U+00E9) and decomposed (e + U+0301).
  const auto nfc = chars_with(a, {"\u00e9", "e", "\u0301"}, {{"type", "NFC"}});
  EXPECT_EQ(ids(nfc, "e\u0301"), (Ids{0}));
  // x is not in the vocab and dropped; HF's offsets are running sums of the kept symbols' lengths,
  // so é's 2 bytes count from 0 and map back onto x and e.
  EXPECT_EQ(offsets(nfc, "xe\u0301"), (Offsets{{0, 2}}));
  EXPECT_EQ(offsets(nfc, "e\u0301"), (Offsets{{0, 1}}));  // the composed é keeps e's range, as HF aligns it
  const auto nfd = chars_with(b, {"\u00e9", "e", "\u0301"}, {{"type", "NFD"}});
  EXPECT_EQ(ids(nfd, "\u00e9"), (Ids{1, 2}));
  EXPECT_EQ(offsets(nfd, "\u00e9"), (Offsets{{0, 2}, {0, 2}}));
  const auto nfkc = chars_with(c, {"f", "i"}, {{"type", "NFKC"}});
  EXPECT_EQ(ids(nfkc, "\ufb01"), (Ids{0, 1}));  // the ligature fi
  const auto nfkd = chars_with(d, {"A", "\u030a"}, {{"type", "NFKD"}});
  EXPECT_EQ(ids(nfkd, "\u212b"), (Ids{0, 1}));  // the angstrom sign
}

TEST(Tokenizer, LowercaseStripStripAccentsReplace) {
  TempDir a, b, c, d;
  const auto lower = chars_with(a, {"i", "\u0307", "\u03c3", "a"}, {{"type", "Lowercase"}});
  EXPECT_EQ(ids(lower, "\u0130\u03a3A"), (Ids{0, 1, 2, 3}));  // İ -> i̇ (two code points), Σ -> σ
  EXPECT_EQ(offsets(lower, "\u0130\u03a3A"), (Offsets{{0, 2}, {0, 2}, {2, 4}, {4, 5}}));
  const auto strip = chars_with(b, {"a", " "}, {{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}});
  EXPECT_EQ(ids(strip, "  a a  "), (Ids{0, 1, 0, 1, 1}));
  EXPECT_EQ(offsets(strip, "  a a  ")[0], std::make_pair(2u, 3u));
  const auto accents = chars_with(
      c, {"e", "a"}, {{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "StripAccents"}}}}});
  EXPECT_EQ(ids(accents, "\u00e9a"), (Ids{0, 1}));
  const auto replace = chars_with(d, {"x", "-"}, {{"type", "Replace"}, {"pattern", {{"Regex", "[0-9]+"}}}, {"content", "x"}});
  EXPECT_EQ(ids(replace, "123-4"), (Ids{0, 1, 0}));
  EXPECT_EQ(offsets(replace, "123-4"), (Offsets{{2, 3}, {3, 4}, {4, 5}}));  // the last replaced byte's range
}

// ---- pre-tokenizers

namespace {

const std::vector<std::string> kPieces{"the", "-", "final", "--", "countdown", "the-", "final-", "-final", "-countdown", "x"};

Ids split_ids(const json& pre_tokenizer, const std::string& text) {
  TempDir dir;
  return ids(chars_with(dir, kPieces, nullptr, pre_tokenizer), text);
}

json split(const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
}

}  // namespace

TEST(Tokenizer, SplitBehaviours) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(split_ids(split("Removed"), text), (Ids{0, 2, 4}));
  EXPECT_EQ(split_ids(split("Isolated"), text), (Ids{0, 1, 2, 1, 1, 4}));
  EXPECT_EQ(split_ids(split("MergedWithPrevious"), text), (Ids{5, 6, 1, 4}));
  EXPECT_EQ(split_ids(split("MergedWithNext"), text), (Ids{0, 7, 1, 8}));
  EXPECT_EQ(split_ids(split("Contiguous"), text), (Ids{0, 1, 2, 3, 4}));
  // Inverted: the matches are the delimiters' complement, so "-" runs are what is removed... or kept.
  EXPECT_EQ(split_ids(split("Removed", true), text), (Ids{1, 1, 1}));
  const json regex = {{"type", "Split"}, {"pattern", {{"Regex", "-+"}}}, {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_EQ(split_ids(regex, text), (Ids{0, 1, 2, 3, 4}));
}

TEST(Tokenizer, RegexIteratesMatchesAsTheOnigCrate) {
  // A pattern without groups is matched many matches a call; one with a group of its own one
  // match a call. Both must give the onig crate's iteration: empty matches kept except right
  // where the previous match ended, gaps found by a search, runs longer than one call's batch.
  auto all = [](const std::string& pattern, const std::string& text) {
    const e3::tok::Regex re(pattern, "test");
    e3::tok::MatchRegion region;
    std::vector<std::pair<size_t, size_t>> out;
    re.find_all(text, region, out);
    return out;
  };
  using Spans = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(all("a*", "baaab"), (Spans{{0, 0}, {1, 4}, {5, 5}}));
  EXPECT_EQ(all("(a*)", "baaab"), (Spans{{0, 0}, {1, 4}, {5, 5}}));
  EXPECT_EQ(all("[0-9]+", "ab12cd345e"), (Spans{{2, 4}, {6, 9}}));
  EXPECT_EQ(all("a|(?=b)", "aab"), (Spans{{0, 1}, {1, 2}}));  // the empty match at 2 follows the last one
  EXPECT_EQ(all("x*", ""), (Spans{{0, 0}}));
  std::string words;
  Spans expected;
  for (size_t i = 0; i < 50; ++i) {
    expected.emplace_back(words.size(), words.size() + 2);
    words += i % 7 == 3 ? "\xc3\xa9" : "ab";  // some two-byte characters
    expected.emplace_back(words.size(), words.size() + 1);
    words += ' ';
  }
  EXPECT_EQ(all(R"(\S+|\s+)", words), expected);
  EXPECT_EQ(all(R"((\S+)|\s+)", words), expected);
  const std::string gaps = "1.2..3...4....5";
  EXPECT_EQ(all("[0-9]|(?<=[0-9])[.]", gaps), all("([0-9])|(?<=[0-9])[.]", gaps));
  EXPECT_EQ(all("[0-9]|(?<=[0-9])[.]", gaps).size(), 9u);
}

TEST(Tokenizer, MetaspaceSchemes) {
  const std::vector<std::string> tokens{"\u2581hello", "\u2581world", "hello", "\u2581", "world"};
  auto with = [&](const std::string& scheme, bool split_flag, const std::string& text) {
    TempDir dir;
    json pre = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split_flag}};
    json j = bpe_json(tokens);
    j["pre_tokenizer"] = pre;
    j["model"]["ignore_merges"] = true;
    j["added_tokens"] = json::array({{{"id", 5}, {"content", "<s>"}, {"special", true}, {"lstrip", false},
                                      {"rstrip", false}, {"single_word", false}, {"normalized", false}}});
    j["model"]["vocab"]["<s>"] = 5;
    return ids(load(dir, j), text);
  };
  EXPECT_EQ(with("always", true, "hello world"), (Ids{0, 1}));
  EXPECT_EQ(with("never", true, "hello world"), (Ids{2, 1}));
  EXPECT_EQ(with("first", true, "hello<s>world"), (Ids{0, 5, 4}));
  EXPECT_EQ(with("always", true, "hello<s>world"), (Ids{0, 5, 1}));
  EXPECT_EQ(with("always", false, "world"), (Ids{1}));
}

TEST(Tokenizer, DigitsPunctuationWhitespace) {
  const std::vector<std::string> tokens{"a", "1", "2", "3", "12", "123", "b", "!", "?", "!?", "a!", "c d", "c", "d", " "};
  auto with = [&](const json& pre, const std::string& text) {
    TempDir dir;
    return ids(chars_with(dir, tokens, nullptr, pre), text);
  };
  EXPECT_EQ(with({{"type", "Digits"}, {"individual_digits", true}}, "a123b"), (Ids{0, 1, 2, 3, 6}));
  EXPECT_EQ(with({{"type", "Digits"}, {"individual_digits", false}}, "a123b"), (Ids{0, 5, 6}));
  EXPECT_EQ(with({{"type", "Punctuation"}, {"behavior", "Isolated"}}, "a!?"), (Ids{0, 7, 8}));
  EXPECT_EQ(with({{"type", "Punctuation"}, {"behavior", "Contiguous"}}, "a!?"), (Ids{0, 9}));
  EXPECT_EQ(with({{"type", "Whitespace"}}, "a!? 12\tb"), (Ids{0, 9, 4, 6}));
  EXPECT_EQ(with({{"type", "WhitespaceSplit"}}, " a!  b "), (Ids{10, 6}));
  EXPECT_EQ(with({{"type", "Sequence"},
                  {"pretokenizers", {{{"type", "WhitespaceSplit"}}, {{"type", "Digits"}, {"individual_digits", true}}}}},
                 "a12 3"),
            (Ids{0, 1, 2, 3}));
}

// ---- added tokens

namespace {

json added(int id, const std::string& content, bool special, json extra = json::object()) {
  json t = {{"id", id},          {"content", content}, {"special", special}, {"lstrip", false},
            {"rstrip", false},  {"single_word", false}, {"normalized", !special}};
  t.update(extra);
  return t;
}

}  // namespace

TEST(Tokenizer, AddedTokensFoundFirstLongestWithStripRules) {
  TempDir dir;
  json j = bpe_json({"a", "b", " ", "c", "t", "o", "n"});
  j["model"]["ignore_merges"] = true;
  j["added_tokens"] = json::array({added(10, "<a>", true), added(11, "<a><b>", true),
                                   added(12, "<e>", true, {{"lstrip", true}, {"rstrip", true}}),
                                   added(13, "cat", false, {{"single_word", true}, {"normalized", false}})});
  const auto t = load(dir, j);
  EXPECT_EQ(ids(t, "a<a><b>b"), (Ids{0, 11, 1}));
  EXPECT_EQ(ids(t, "a<a>b"), (Ids{0, 10, 1}));
  EXPECT_EQ(ids(t, "a  <e>  b"), (Ids{0, 12, 1}));
  EXPECT_EQ(offsets(t, "a  <e>  b"), (Offsets{{0, 1}, {1, 8}, {8, 9}}));
  EXPECT_EQ(ids(t, "a cat b"), (Ids{0, 2, 13, 2, 1}));
  EXPECT_EQ(ids(t, "concat"), (Ids{3, 5, 6, 3, 0, 4}));  // inside a word: not the token
  EXPECT_TRUE(t.is_special(10));
  EXPECT_FALSE(t.is_special(13));
  EXPECT_FALSE(t.is_special(0));
  EXPECT_EQ(t.token_bytes(12), "<e>");
  EXPECT_EQ(t.vocab_size(), 14);
  EXPECT_EQ(t.token_to_id("<a><b>"), 11);
}

TEST(Tokenizer, NormalizedAddedTokensMatchTheNormalizedText) {
  TempDir dir;
  json j = bpe_json({"a", "b"});
  j["normalizer"] = {{"type", "Lowercase"}};
  j["added_tokens"] = json::array({added(5, "Hello", false), added(6, "[X]", true)});
  const auto t = load(dir, j);
  EXPECT_EQ(ids(t, "aHeLLob"), (Ids{0, 5, 1}));
  EXPECT_EQ(offsets(t, "aHeLLob"), (Offsets{{0, 1}, {1, 6}, {6, 7}}));
  EXPECT_EQ(ids(t, "a[X]b[x]"), (Ids{0, 6, 1})) << "[x] is not [X]; its characters are not in the vocab";
}

// ---- post-processors and tokenizer_config.json

TEST(Tokenizer, TemplateAddsSpecialTokensAtZeroOffsets) {
  TempDir dir;
  json j = bpe_json({"<s>", "</s>", "a"});
  j["added_tokens"] = json::array({added(0, "<s>", true), added(1, "</s>", true)});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {0}}, {"tokens", {"<s>"}}}},
                          {"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}};
  const auto t = load(dir, j, json{{"bos_token", "<s>"}, {"eos_token", {{"content", "</s>"}, {"__type", "AddedToken"}}}});
  EXPECT_EQ(ids(t, "aa", true), (Ids{0, 2, 2, 1}));
  EXPECT_EQ(ids(t, "aa", false), (Ids{2, 2}));
  EXPECT_EQ(offsets(t, "aa", true), (Offsets{{0, 0}, {0, 1}, {1, 2}, {0, 0}}));
  EXPECT_TRUE(t.config().add_bos_token);  // implied by the template
  EXPECT_TRUE(t.config().add_eos_token);
  EXPECT_EQ(t.config().eos_token, "</s>");
  EXPECT_EQ(t.config().template_variables["bos_token"], "<s>");
}

TEST(Tokenizer, ConfigAddBosTokenRebuildsTheTemplateAsTransformersDoes) {
  TempDir dir, dir2;
  json j = bpe_json({"<s>", "</s>", "a"});
  j["added_tokens"] = json::array({added(0, "<s>", true), added(1, "</s>", true)});
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}};
  // DeepSeek-V3: no BOS in tokenizer.json, add_bos_token in the config.
  const auto t = load(dir, j, json{{"add_bos_token", true}, {"add_eos_token", false}, {"bos_token", "<s>"}, {"eos_token", "</s>"}});
  EXPECT_EQ(ids(t, "a", true), (Ids{0, 2}));
  EXPECT_TRUE(t.config().add_bos_token);
  // Only add_eos_token given: the rebuilt template has no BOS.
  const auto eos_only = load(dir2, j, json{{"add_eos_token", true}, {"bos_token", "<s>"}, {"eos_token", "</s>"}});
  EXPECT_EQ(ids(eos_only, "a", true), (Ids{2, 1}));
  EXPECT_FALSE(eos_only.config().add_bos_token);
  EXPECT_NE(t.fingerprint(), eos_only.fingerprint());
}

TEST(Tokenizer, ChatTemplatesFromTheConfigAndTheJinjaFile) {
  TempDir dir;
  const json j = bpe_json({"a"});
  const json config = {{"chat_template", json::array({{{"name", "default"}, {"template", "D"}},
                                                      {{"name", "tool_use"}, {"template", "T"}}})},
                       {"pad_token", nullptr},
                       {"unk_token", {{"content", "<unk>"}}},
                       {"additional_special_tokens", {"<x>"}}};
  {
    const auto t = load(dir, j, config);
    ASSERT_TRUE(t.config().chat_template.has_value());
    EXPECT_EQ(*t.config().chat_template, "D");
    EXPECT_EQ(t.config().named_templates.at("tool_use"), "T");
    EXPECT_EQ(t.config().unk_token, "<unk>");
    EXPECT_EQ(t.config().pad_token, "");
    EXPECT_FALSE(t.config().template_variables.contains("pad_token"));
    EXPECT_EQ(t.config().template_variables["additional_special_tokens"], json::array({"<x>"}));
  }
  dir.write("chat_template.jinja", "{{ messages }}");
  EXPECT_EQ(*Tokenizer::load(dir.path()).config().chat_template, "{{ messages }}");
}

// ---- tiktoken.model (Kimi-K2)

namespace {

std::string base64(const std::string& bytes) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out += abc[(v >> (6 * k)) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += abc[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

}  // namespace

TEST(Tokenizer, TiktokenRanksSpecialTokensAndSplitPattern) {
  TempDir dir;
  std::string model;
  for (int b = 0; b < 256; ++b) model += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  const std::vector<std::string> merged{"he", "ll", "hell", " w", " wo", "\xE4\xBD"};
  for (size_t i = 0; i < merged.size(); ++i) model += base64(merged[i]) + " " + std::to_string(256 + i) + "\n";
  dir.write("tiktoken.model", model);
  const int n = 256 + static_cast<int>(merged.size());
  dir.write("tokenizer_config.json",
            json{{"bos_token", "[BOS]"},
                 {"eos_token", "[EOS]"},
                 {"added_tokens_decoder",
                  {{std::to_string(n), {{"content", "[BOS]"}, {"special", true}}},
                   {std::to_string(n + 1), {{"content", "[EOS]"}, {"special", true}}},
                   {std::to_string(n + 5), {{"content", "<|im_end|>"}, {"special", true}}}}}}
                .dump());
  const auto t = Tokenizer::load(dir.path());
  EXPECT_EQ(t.vocab_size(), n + 258);
  // "hello": he, ll (rank 257), hell (258) + o; " wo" is one rank; "rld" stays bytes.
  EXPECT_EQ(ids(t, "hello world"), (Ids{258, 'o', 260, 'r', 'l', 'd'}));
  EXPECT_EQ(offsets(t, "hello world"), (Offsets{{0, 4}, {4, 5}, {5, 8}, {8, 9}, {9, 10}, {10, 11}}));
  EXPECT_EQ(ids(t, "[BOS]hi<|im_end|><|reserved_token_" + std::to_string(n + 7) + "|>"),
            (Ids{n, 'h', 'i', n + 5, n + 7}));
  EXPECT_TRUE(t.is_special(n + 5));
  EXPECT_EQ(t.token_bytes(258), "hell");
  EXPECT_EQ(ids(t, "hello", true), ids(t, "hello", false));  // the slow tokenizer adds nothing
  // Han characters split as their own run: "你好" is E4 BD A0 E5 A5 BD, with E4 BD a rank.
  EXPECT_EQ(ids(t, "a\xE4\xBD\xA0"), (Ids{'a', 261, 0xA0}));
}

// ---- threads, errors, UTF-8

TEST(Tokenizer, EncodeFromManyThreadsAtOnce) {
  TempDir dir;
  const auto t = load(dir, byte_level_json({"He", "ll", "Hell", "\u0120w"}, {"H e", "l l", "He ll", "\u0120 w"}));
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Hello world " + std::to_string(i) + " \xE4\xBD\xA0\xE5\xA5\xBD! ";
  const auto expected = t.encode(text, true);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&] {
      for (int r = 0; r < 20; ++r) {
        const auto got = t.encode(text, true);
        if (got.size() != expected.size() ||
            !std::equal(got.begin(), got.end(), expected.begin(), [](const Token& a, const Token& b) {
              return a.id == b.id && a.begin == b.begin && a.end == b.end;
            }))
          ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

namespace {

std::string load_error(const TempDir& dir, const json& j) {
  try {
    load(dir, j);
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Model);
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(Tokenizer, UnsupportedComponentsAreClearModelErrors) {
  {
    TempDir dir;
    try {
      Tokenizer::load(dir.path());
      FAIL();
    } catch (const e3::Error& e) {
      EXPECT_EQ(e.kind(), e3::ErrorKind::Model);
      EXPECT_NE(std::string(e.what()).find("no tokenizer in " + dir.path().string()), std::string::npos) << e.what();
    }
  }
  TempDir a, b, c, d, e, f;
  json unigram = bpe_json({"a"});
  unigram["model"] = {{"type", "Unigram"}, {"vocab", json::array()}};
  const std::string u = load_error(a, unigram);
  EXPECT_NE(u.find("tokenizer.json"), std::string::npos) << u;
  EXPECT_NE(u.find("model type 'Unigram' is not supported"), std::string::npos) << u;
  json wordpiece = bpe_json({"a"});
  wordpiece["model"] = {{"type", "WordPiece"}, {"vocab", json::object()}};
  EXPECT_NE(load_error(b, wordpiece).find("'WordPiece'"), std::string::npos);
  json bert = bpe_json({"a"});
  bert["normalizer"] = {{"type", "BertNormalizer"}};
  EXPECT_NE(load_error(c, bert).find("normalizer type 'BertNormalizer' is not supported"), std::string::npos);
  json dropout = bpe_json({"a"});
  dropout["model"]["dropout"] = 0.1;
  EXPECT_NE(load_error(d, dropout).find("dropout"), std::string::npos);
  json bad_regex = bpe_json({"a"});
  bad_regex["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_NE(load_error(e, bad_regex).find("bad regex '(unclosed'"), std::string::npos);
  json bad_merge = bpe_json({"a"}, {"a b"});
  EXPECT_NE(load_error(f, bad_merge).find("'b' which is not in the vocab"), std::string::npos);
}

TEST(Tokenizer, ValidUtf8) {
  size_t at = 99;
  EXPECT_TRUE(e3::tok::valid_utf8("plain \xC3\xA9 \xE4\xBD\xA0 \xF0\x9F\x98\x80", &at));
  EXPECT_TRUE(e3::tok::valid_utf8(""));
  EXPECT_TRUE(e3::tok::valid_utf8("\xEF\xBF\xBF \xF4\x8F\xBF\xBF"));  // U+FFFF, U+10FFFF
  const std::pair<std::string, size_t> bad[] = {
      {"ab\xC0\x80", 2},            // overlong NUL
      {"a\xED\xA0\x80", 1},         // a surrogate
      {"abc\xE4\xBD", 3},           // cut short
      {"\xF4\x90\x80\x80", 0},      // past U+10FFFF
      {"x\xC3(", 1},                // a bad continuation
      {"xy\x80", 2},                // a lone continuation byte
      {"\xE0\x9F\xBF", 0},          // overlong 3-byte
  };
  for (const auto& [text, offset] : bad) {
    EXPECT_FALSE(e3::tok::valid_utf8(text, &at)) << text;
    EXPECT_EQ(at, offset) << text;
  }
}

TEST(Tokenizer, InvalidUtf8IsAnInputError) {
  TempDir dir;
  const auto t = load(dir, byte_level_json({}, {}));
  try {
    t.encode("ok \xC3(", false);
    FAIL() << "no error";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Input);
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 (byte 3 of 5)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.encode_ids("\xFF", true), e3::Error);
}

namespace {

// The message of loading `dir`, which must fail with a Model error.
std::string dir_load_error(const TempDir& dir) {
  try {
    Tokenizer::load(dir.path());
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Model);
    return e.what();
  }
  ADD_FAILURE() << "no error loading " << dir.path();
  return "";
}

}  // namespace

TEST(Tokenizer, BadJsonFilesAreModelErrorsNamingTheFile) {
  TempDir a, b, c;
  a.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\",");
  const std::string cut = dir_load_error(a);
  EXPECT_NE(cut.find((a.path() / "tokenizer.json").string()), std::string::npos) << cut;
  b.write("tokenizer.json", "[1, 2]");
  const std::string list = dir_load_error(b);
  EXPECT_NE(list.find("not a tokenizer.json"), std::string::npos) << list;
  c.write("tokenizer.json", bpe_json({"a"}).dump());
  c.write("tokenizer_config.json", "{\"bos_token\": ");
  const std::string config = dir_load_error(c);
  EXPECT_NE(config.find((c.path() / "tokenizer_config.json").string()), std::string::npos) << config;
}

TEST(Tokenizer, SequencePostProcessorTrimsThenAddsTheTemplateLikeLlama3) {
  TempDir dir;
  json j = byte_level_json({"\u0120w", "<|begin_of_text|>"}, {"\u0120 w"});
  j["pre_tokenizer"]["add_prefix_space"] = false;
  j["added_tokens"] = json::array({added(257, "<|begin_of_text|>", true)});
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
        {{"type", "TemplateProcessing"},
         {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
         {"pair", json::array()},
         {"special_tokens",
          {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {257}}, {"tokens", {"<|begin_of_text|>"}}}}}}}}}};
  const auto t = load(dir, j);
  EXPECT_EQ(ids(t, "a w", true), (Ids{257, 'a', 256}));
  EXPECT_EQ(offsets(t, "a w", true), (Offsets{{0, 0}, {0, 1}, {1, 3}}));  // trim_offsets false: " w" keeps its space
  EXPECT_EQ(ids(t, "a w", false), (Ids{'a', 256}));
  EXPECT_TRUE(t.config().add_bos_token);
  EXPECT_FALSE(t.config().add_eos_token);
}

TEST(Tokenizer, FingerprintIsStableAndFollowsWhatDecidesTheIds) {
  TempDir a, b, c, d, e;
  json j = byte_level_json({"He", "ll", "<s>"}, {"H e", "l l"});
  j["added_tokens"] = json::array({added(258, "<s>", true)});
  const std::string first = load(a, j).fingerprint();
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(load(b, j).fingerprint(), first);  // the same files in another directory
  EXPECT_EQ(Tokenizer::load(a.path()).fingerprint(), first);
  json reordered = j;
  reordered["model"]["merges"] = {"l l", "H e"};
  EXPECT_NE(load(c, reordered).fingerprint(), first);
  // The config's BOS changes the ids with special tokens; a flag that changes nothing does not.
  EXPECT_NE(load(d, j, json{{"add_bos_token", true}, {"bos_token", "<s>"}}).fingerprint(), first);
  EXPECT_EQ(load(e, j, json{{"add_bos_token", false}}).fingerprint(), first);
}

TEST(Tokenizer, AddedTokensOfTheConfigAloneAreNotMatched) {
  // transformers' fast tokenizers take added tokens from tokenizer.json; tokenizer_config.json's
  // added_tokens_decoder repeats them and is read only for tiktoken.model.
  TempDir dir;
  const auto t = load(dir, bpe_json({"<", "x", ">"}),
                      json{{"added_tokens_decoder", {{"7", {{"content", "<x>"}, {"special", true}}}}}});
  EXPECT_EQ(ids(t, "<x>"), (Ids{0, 1, 2}));
}
