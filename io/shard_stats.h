// `eagle3_extract stats DIR`: what the stored states and samples of an output directory hold
// (RMS, absolute maximum and non-finite counts per state; sample lengths and the loss mask),
// read as verify reads: a pool of threads, each shard file once, the values by pread straight
// from the stored bits.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace e3::io {

// The values of one stored state over some rows. Rows are added whole and partials are merged
// in a fixed order, so the sums are the same bits whatever the number of threads.
struct ValueStats {
  uint64_t count = 0;             // elements, finite or not
  double sum_squares = 0;         // of the finite elements (a Neumaier sum over rows)
  double sum_squares_carry = 0;   // its compensation
  double abs_max = 0;             // of the finite elements
  uint64_t nan = 0, pos_inf = 0, neg_inf = 0;

  // One row of n decoded values.
  void add_row(const float* x, size_t n);
  // One fp8 row: n e4m3fn codes and the row's scale, as the row decoded (code x scale, in
  // float) would give: the same bits as add_row of the decoded row. `scratch` holds n floats.
  void add_e4m3_row(const uint8_t* codes, float scale, size_t n, float* scratch);
  void merge(const ValueStats& other);
  uint64_t finite() const { return count - nan - pos_inf - neg_inf; }
  // Over the finite elements; 0 when there are none.
  double rms() const;
};

// Bin b of the length histogram holds the samples of [2^b, 2^(b+1)) tokens.
inline constexpr int kLengthBins = 40;

struct SampleStats {
  uint64_t samples = 0;
  uint64_t tokens = 0;
  uint64_t masked = 0;         // loss_mask ones
  uint64_t all_zero_mask = 0;  // samples with no token trained on
  uint64_t min_tokens = 0, max_tokens = 0;
  std::array<uint64_t, kLengthBins> length_bins{};

  // One sample's loss_mask of T tokens (any non-zero byte counts as one).
  void add(const uint8_t* loss_mask, size_t T);
  void merge(const SampleStats& other);
  double masked_fraction() const { return tokens == 0 ? 0.0 : static_cast<double>(masked) / tokens; }
};
// The bin of a length of T >= 1 tokens.
int length_bin(uint64_t T);

// One shard's partial, merged with the others in shard index order.
struct ShardStats {
  int64_t shard_index = 0;
  std::vector<ValueStats> states;  // one per stored state, in StatsReport::state_names' order
  SampleStats samples;
  uint64_t bytes_read = 0;
};

// Partials as bytes, to gather them from the ranks (the same build on every node).
std::string encode_partials(const std::vector<ShardStats>& partials);
std::vector<ShardStats> decode_partials(const std::string& bytes);

struct StatsReport {
  std::filesystem::path dir;
  std::string dtype;
  // One per stored state: "hidden_states[:,k]" for each capture id, then the final states.
  std::vector<std::string> state_names;
  std::vector<int32_t> layer_ids;           // the capture id of each hidden_states slot
  std::vector<std::string> final_norms;     // "post-norm" | "pre-norm" of each final state
  std::vector<ValueStats> states;
  SampleStats samples;
  int64_t shards_listed = 0;   // by the manifests present (all read, over the ranks)
  int64_t shards_planned = 0;  // of the parts present
  int64_t parts = 1, part_count = 1;
  int64_t num_samples = 0;     // in the input
  int64_t skipped = 0;         // samples left out (listed in the manifests)
  bool complete = false;
  // This process's share, and what it read of it.
  std::vector<ShardStats> partials;
  uint64_t bytes_read = 0;
  double seconds = 0;

  // Merges `partials` (every rank's, gathered) in shard index order into states and samples.
  void combine(std::vector<ShardStats> all);
};

struct StatsOptions {
  int threads = 0;  // shards read at once; 0: the cores of this machine
  int rank = 0, ranks = 1;  // this process reads the shards whose index % ranks == rank
};

// Reads the manifests of `dir` (errors as verify's: exit 6 for a directory that is not an
// output or a manifest that is damaged), then this process's share of the listed shards, each
// once. A shard that cannot be read as eagle3_extract writes it is a verify error naming the
// file. The report's partials are this process's; states and samples are still empty.
StatsReport collect_stats(const std::filesystem::path& dir, const StatsOptions& options = {});

}  // namespace e3::io
