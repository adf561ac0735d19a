// How often each token id of the target occurs where loss_mask is 1, the tokens a draft model
// learns to predict: EAGLE-3 drafts predict over the most frequent of them (a reduced vocabulary,
// jobs/draft_vocab.h). Each shard stores the counts of its own samples in /token_counts, so the
// totals of a run are the sum over its shards, whatever the packing of steps, DP size or resume
// (a shard is a fixed range of samples).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace e3::io {

// The dataset of a shard: int64 [n, 2], rows (token id, count), ids ascending, counts > 0; its
// attribute `vocab_size` is the target's vocabulary size (config.json) where known.
inline constexpr const char* kTokenCountsDataset = "token_counts";

struct TokenCount {
  int64_t id = 0;
  int64_t count = 0;
  bool operator==(const TokenCount&) const = default;
};

// Counts by id, in a dense array that grows to the largest id seen (at most the vocabulary:
// a few MiB), so that counting is a plain increment per token.
class TokenCounter {
 public:
  // Counts ids[i] for every i with mask[i] != 0. Throws an internal error on a negative id.
  void add(const int32_t* ids, const uint8_t* mask, size_t n);
  void add(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask);
  // Adds counts kept elsewhere (another shard's).
  void add(const std::vector<TokenCount>& counts);
  // The non-zero counts, ids ascending.
  std::vector<TokenCount> counts() const;
  int64_t total() const { return total_; }

 private:
  void bump(int64_t id, int64_t n);
  std::vector<int64_t> by_id_;
  int64_t total_ = 0;
};

// The counts of a shard as stored.
struct StoredTokenCounts {
  std::vector<TokenCount> counts;  // ids ascending
  int64_t vocab_size = 0;          // 0: not recorded
};

// Writes /token_counts into an open shard file (`vocab_size` 0: no attribute).
void write_token_counts(hid_t file, const std::vector<TokenCount>& counts, int64_t vocab_size,
                        const std::string& where);
// Reads /token_counts of an open shard file; nullopt when the shard has none (written before
// eagle3_extract counted tokens). Throws a `kind` error naming `where` when the dataset is not
// int64 [n, 2], its ids do not rise, a count is not positive or an id lies outside vocab_size.
std::optional<StoredTokenCounts> read_token_counts(hid_t file, const std::string& where, ErrorKind kind);

}  // namespace e3::io
