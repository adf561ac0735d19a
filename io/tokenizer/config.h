// Reading tokenizer_config.json (and chat_template.jinja beside it) into TokenizerConfig.
#pragma once

#include <filesystem>

#include <nlohmann/json_fwd.hpp>

#include "io/tokenizer/added_tokens.h"
#include "io/tokenizer/tokenizer.h"

namespace e3::tok {

struct ConfigFile {
  TokenizerConfig config;
  bool has_add_bos = false, has_add_eos = false;  // the keys were given (transformers then rebuilds the template)
  std::vector<AddedToken> added_tokens_decoder;   // its "added_tokens_decoder", by id
  std::string raw;                                // the file's text ("" when absent), for the fingerprint
};

// DIR/tokenizer_config.json when present (all defaults otherwise), DIR/chat_template.jinja taking
// the default template's place when present.
ConfigFile read_tokenizer_config(const std::filesystem::path& dir);

// A special token given as a string or as an AddedToken object ({"content": ...}); "" for null.
std::string token_content(const nlohmann::json& j, const std::string& where);

}  // namespace e3::tok
