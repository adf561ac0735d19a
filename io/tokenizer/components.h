// The normalizers and pre-tokenizers of tokenizer.json, built from their JSON objects. Each is
// immutable once built; the per-call state lives in Scratch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/tokenizer/normalized.h"
#include "io/tokenizer/regex.h"

namespace e3::tok {

struct Scratch {
  MatchRegion region;
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<Normalized> pieces, next;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(Normalized& n, Scratch& scratch) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their parts (scratch.next is free for the implementation to use).
  virtual void apply(std::vector<Normalized>& pieces, Scratch& scratch) const = 0;
  // True when this is a chain of Isolated, non-inverted regex splits (appended to `chain`, in
  // order) and nothing else: then untouched text can be split as views, without copies.
  virtual bool isolated_regex_chain(std::vector<const Regex*>& chain) const { return false; }
};

// `where` names the file and key for errors: "DIR/tokenizer.json: normalizer". A null JSON gives
// nullptr. Unknown or unsupported types throw e3::Error(Model) naming `where` and the type.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);

struct PreTokenizerInfo {
  bool byte_level = false;  // ends with ByteLevel: the model works on the raw bytes of each piece
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where,
                                                 PreTokenizerInfo& info);

// HF's split behaviour names.
SplitBehavior split_behavior(const nlohmann::json& j, const std::string& where);
// A Split/Replace pattern object {"String": s} or {"Regex": r}, as an Oniguruma pattern.
std::string pattern_source(const nlohmann::json& j, const std::string& where);

}  // namespace e3::tok
