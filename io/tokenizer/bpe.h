// The word models: HF's BPE (merges by rank, byte fallback, unk, prefixes, ignore_merges) and
// tiktoken's rank BPE (Kimi-K2), both giving each token's byte range within the word.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace e3::tok {

// Open-addressing map from byte strings to ids: the vocabulary lookups of the hot path.
class StringIdMap {
 public:
  void insert(std::string_view key, int32_t id);  // a repeated key keeps the later id
  int32_t find(std::string_view key) const;      // -1 when absent
  size_t size() const { return count_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, length = 0;
    int32_t id = -1;
  };
  static uint64_t hash_of(std::string_view key);
  void grow();
  std::vector<Slot> slots_;
  std::string arena_;
  size_t count_ = 0;
};

// Open-addressing map from a pair of token ids to its merge (rank, merged id): the lookup of the
// BPE merge loop, which a node-based map made the loop's main cost on long words.
class PairMap {
 public:
  void build(const std::vector<std::pair<uint64_t, std::pair<uint32_t, int32_t>>>& entries);  // later keys win
  const std::pair<uint32_t, int32_t>* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // never a key: ids are non-negative
  static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
  }
  struct Slot {
    uint64_t key = kEmpty;
    std::pair<uint32_t, int32_t> value{0, -1};
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

struct WordToken {
  int32_t id;
  uint32_t begin, end;  // bytes within the word
};

// Per-thread memory of words already split (a word's tokens depend only on its bytes).
class WordCache {
 public:
  const std::vector<WordToken>* find(std::string_view word) const;
  void insert(std::string_view word, const std::vector<WordToken>& tokens);
  bool enabled = true;  // off: every word is split anew (to measure the rest)

 private:
  static constexpr size_t kCapacity = 1 << 16, kMaxWordBytes = 256;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<WordToken>, Hash, std::equal_to<>> map_;
};

// The merge loop's queue for long words: keys (rank << 32 | position), popped lowest first. A
// merge only makes pairs of higher rank in a merges list learned in order, so the ranks popped
// never go down: keys are kept in buckets by the highest bit where their rank differs from the
// rank being merged (a radix heap), and the keys of that rank are taken together, in order of
// position. Far fewer mispredicted branches than a binary heap, which was most of the time of a
// 2,000-byte word. push() refuses a key whose rank is not above the one being merged.
class MonotoneQueue {
 public:
  void clear();
  bool push(uint64_t key);
  bool empty() const { return size_ == 0; }
  uint64_t pop();                          // the lowest key; not empty()
  void drain(std::vector<uint64_t>& out);  // moves every key to `out`, leaving the queue empty

 private:
  static uint32_t rank_of(uint64_t key) { return static_cast<uint32_t>(key >> 32); }
  void put(uint64_t key);
  std::vector<uint64_t> buckets_[33];  // bucket 0: the keys of rank `rank_`, sorted from `taken_` on
  std::vector<uint64_t> moving_;
  uint32_t rank_ = 0;
  uint64_t occupied_ = 0;  // bit i: bucket i not empty
  size_t size_ = 0, taken_ = 0;
  bool popping_ = false;   // a pop happened since clear(): bucket 0 is sorted and closed
};

// What the word models work in, one per thread: the cache and the merge loop's buffers.
struct WordState {
  WordCache cache;
  std::vector<WordToken> symbols;  // a word's symbols while it is merged
  std::vector<int32_t> next, prev, new_id;
  std::vector<uint32_t> rank;
  std::vector<uint64_t> heap;
  std::vector<char> alive;
  std::vector<WordToken> tokens;
  MonotoneQueue queue;
};

class Bpe {
 public:
  // The "model" object of tokenizer.json. `byte_level`: the pre-tokenizer ends with ByteLevel, so
  // words arrive as raw bytes and the vocabulary is read back from GPT-2's byte alphabet.
  Bpe(const nlohmann::json& model, bool byte_level, const std::string& where);

  void tokenize(std::string_view word, std::vector<WordToken>& out, WordState& state) const;
  int32_t token_to_id(std::string_view token) const;  // in tokenizer.json's spelling
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }  // "" for holes
  bool byte_level() const { return byte_level_; }

 private:
  using Symbol = WordToken;  // .begin holds the symbol's length until the merges are done
  void initial_symbols(std::string_view word, std::vector<Symbol>& syms) const;
  void merge(std::vector<Symbol>& syms, WordState& state) const;
  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  bool find_merge(int32_t a, int32_t b, uint32_t* rank, int32_t* new_id) const;

  bool byte_level_;
  StringIdMap vocab_;       // the spelling of tokenizer.json
  StringIdMap word_vocab_;  // what words are looked up in: raw bytes when byte_level_
  std::vector<std::string> id_to_token_;
  PairMap merges_;  // (a, b) -> (rank, merged id)
  int32_t byte_ids_[256];   // byte_level_: each raw byte's token (-1 when the vocabulary lacks it)
  int32_t byte_fallback_ids_[256];
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::string prefix_, suffix_;
};

// tiktoken's byte-pair encoding: repeatedly join the adjacent pair whose bytes have the lowest
// rank, the leftmost on ties, until no joined pair is in the vocabulary.
class RankBpe {
 public:
  void add(std::string bytes, int32_t rank);
  void tokenize(std::string_view piece, std::vector<WordToken>& out, WordState& state) const;
  size_t size() const { return ranks_.size(); }
  bool tokenize_has_byte(unsigned char b) const { return ranks_.find(std::string_view(reinterpret_cast<const char*>(&b), 1)) >= 0; }
  const std::vector<std::string>& id_to_bytes() const { return id_to_bytes_; }

 private:
  StringIdMap ranks_;
  std::vector<std::string> id_to_bytes_;
};

// GPT-2's reversible map of bytes to printable characters (HF's bytes_char) and back.
const std::string& byte_to_char_utf8(unsigned char b);
// The raw bytes a byte-level token stands for; false when a character is not in the alphabet.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace e3::tok
