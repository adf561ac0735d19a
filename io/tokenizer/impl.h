// Tokenizer's parts, shared by the loaders (tokenizer.json, tiktoken.model) and encode.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/tokenizer/added_tokens.h"
#include "io/tokenizer/bpe.h"
#include "io/tokenizer/components.h"
#include "io/tokenizer/post_processor.h"
#include "io/tokenizer/tokenizer.h"

namespace e3::tok {

// What one encode call works in; pooled, so a thread takes one for the whole call and the word
// cache warms up without a lock per word.
struct EncodeState {
  Scratch scratch;
  WordState word;
  std::vector<AddedSplit> splits, sub_splits;
  std::vector<WordToken> words;
  std::vector<std::vector<std::pair<size_t, size_t>>> level_matches;  // per split of the view path
};

struct Tokenizer::Impl {
  std::string where;  // the file the tokenizer came from, for messages
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, size_t> added_by_id;
  AddedMatcher raw_matcher, normalized_matcher;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  // Set when the pre-tokenizer is only a chain of Isolated regex splits: untouched text then goes
  // through them as views of the input (the common case, and the fast one).
  bool view_path = false;
  std::vector<const Regex*> view_splits;
  std::unique_ptr<Bpe> bpe;          // tokenizer.json
  std::unique_ptr<RankBpe> ranks;    // tiktoken.model
  std::unique_ptr<Regex> tiktoken_split;
  std::unique_ptr<PostProcessor> post;
  bool metaspace_display = false;  // show '▁' as a space in token_bytes
  TokenizerConfig config;
  std::string fingerprint;
  int64_t vocab_size = 0;

  bool word_cache = true;  // LoadOptions::word_cache
  mutable std::mutex pool_mutex;
  mutable std::vector<std::unique_ptr<EncodeState>> pool;

  std::unique_ptr<EncodeState> acquire() const;
  void release(std::unique_ptr<EncodeState> state) const;
  // encode(), or encode_ids() when !want_offsets (the offsets' trimming is skipped).
  std::vector<Token> encode_tokens(std::string_view text, bool add_special_tokens, bool want_offsets) const;
  // The tokens of `text` before post-processing; trim counts when `trim` is given.
  void encode_text(std::string_view text, EncodeState& st, std::vector<Token>& out, TrimCounts* trim) const;
  void encode_view(std::string_view v, uint32_t offset, size_t level, EncodeState& st, std::vector<Token>& out,
                   TrimCounts* trim) const;
  void encode_tiktoken(std::string_view text, EncodeState& st, std::vector<Token>& out) const;
  void add_tokens(std::vector<AddedToken> tokens);  // fills added, added_by_id and the matchers
};

// DIR/tiktoken.model with DIR/tokenizer_config.json: Kimi-K2's tokenizer (tokenization_kimi.py).
std::unique_ptr<Tokenizer::Impl> load_tiktoken(const std::filesystem::path& dir);

}  // namespace e3::tok
