// The model's own tokenizer, read from its directory: HF's tokenizer.json (+ tokenizer_config.json)
// or Kimi-K2's tiktoken.model. encode() gives the ids HF gives for tokenizer(text,
// add_special_tokens=...), with each token's byte range in the input, so that a caller can map
// character spans of a rendered chat to tokens.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace e3::tok {

// [begin, end) in the input's bytes; begin == end == 0 for the tokens the post-processor adds (BOS,
// EOS), as HF reports them.
struct Token {
  int32_t id;
  uint32_t begin, end;
};

// tokenizer_config.json (+ chat_template.jinja beside it).
struct TokenizerConfig {
  std::optional<std::string> chat_template;              // the default template ("default" of a named list)
  std::map<std::string, std::string> named_templates;    // the other named templates, e.g. "tool_use"
  std::string bos_token, eos_token, pad_token, unk_token; // "" when absent
  bool add_bos_token = false, add_eos_token = false;      // as given, or as the post-processor implies
  nlohmann::json template_variables = nlohmann::json::object();  // bos_token, eos_token, ... as strings
};

struct LoadOptions {
  // Each encoding thread remembers the tokens of up to 65,536 words under 256 bytes, as HF's BPE
  // does (ids are the same either way); off, to measure the rest.
  bool word_cache = true;
};

class Tokenizer {
 public:
  // DIR/tokenizer.json (+ DIR/tokenizer_config.json), or DIR/tiktoken.model (Kimi-K2). A missing
  // file or an unsupported component (Unigram, WordPiece, an unknown normalizer...) throws
  // e3::Error(ErrorKind::Model) naming the file and the type.
  static Tokenizer load(const std::filesystem::path& dir, const LoadOptions& options = {});

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // As HF's tokenizer(text, add_special_tokens=...): the same ids, offsets into `text`. Text that
  // is not valid UTF-8 (see valid_utf8) throws e3::Error(ErrorKind::Input) naming the first bad
  // byte. Thread-safe: any number of threads may encode at once.
  std::vector<Token> encode(std::string_view text, bool add_special_tokens) const;
  std::vector<int32_t> encode_ids(std::string_view text, bool add_special_tokens) const;  // encode's ids, faster

  std::string token_bytes(int32_t id) const;  // the token's bytes (for display), "" for an unknown id
  bool is_special(int32_t id) const;          // an added token with special = true
  int64_t vocab_size() const;                 // highest id + 1
  const TokenizerConfig& config() const;
  std::string fingerprint() const;            // a stable hash of what determines the ids
  std::optional<int32_t> token_to_id(std::string_view token) const;  // an added token or a vocabulary entry

  struct Impl;

 private:
  static Tokenizer load_files(const std::filesystem::path& dir);
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF). Otherwise *bad_offset (when given) is the offset of the first bad byte.
bool valid_utf8(std::string_view text, size_t* bad_offset = nullptr);

}  // namespace e3::tok
