// One output shard: an HDF5 file written under a temporary name and renamed into place
// only when complete, so a visible shard is always a whole one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/hdf5.h"
#include "io/row_writer.h"
#include "io/token_counts.h"
#include "io/write_account.h"
#include "core/dtype.h"
#include "core/storage_codec.h"

namespace e3::io {

// The file attributes that describe the model behind a run's shards (and how it was split).
struct ModelAttributes {
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t tp = 1;
  std::string model_path;
  std::string config_fingerprint;
  int64_t vocab_size = 0;  // the target's (config.json), recorded with the token counts; 0: unknown
};

// File attributes (the DESIGN.md schema) shared by every shard of a run: the model's, and the
// run's own, which an extraction derives from its fingerprint (io::shard_attributes).
struct ShardAttributes : ModelAttributes {
  std::vector<int32_t> layer_ids;
  std::string final_mode;  // post-norm | pre-norm | both | none
  DType dtype = DType::BF16;
  std::string run_fingerprint;
  std::string tool_version;
};

inline constexpr const char* kFormatName = "eagle3-hidden-states";
inline constexpr int64_t kFormatVersion = 1;

// A final-state dataset: its name and whether it is after the final norm ("post-norm") or before.
struct FinalDataset {
  std::string name;
  std::string norm;
};
// The final-state datasets a --final mode stores, in the order the capture delivers them:
// post-norm and pre-norm store `last_hidden_state`; both stores it post-norm and adds
// `last_hidden_state_prenorm`; none stores neither. Throws a usage error for another mode.
std::vector<FinalDataset> final_datasets(const std::string& final_mode);
// One line per stored state saying which layer it is, in HF's and vLLM's numbering (the
// `slots` file attribute, printed by `verify`).
std::vector<std::string> describe_slots(const std::vector<int32_t>& layer_ids, const std::string& final_mode,
                                        int64_t num_hidden_layers);

// "shard-000042.h5"
std::string shard_file_name(int64_t shard_index);
// "/samples/00000003"
std::string sample_group_name(int64_t sample_index);
// The sample index a link name under /samples or /skipped stands for ("00000003": 3), or nullopt
// for a name the writer never makes (not 8 or more digits, or past int64): such a shard is
// damaged or not ours, and reading on would take its name for a number.
std::optional<int64_t> sample_index_of_group(const std::string& name);
// The same, throwing an output error naming `where` (the shard) for another name.
int64_t require_sample_index(const std::string& name, const std::string& where);

// A sample of the input that is not stored, and why: longer than --max-seq-len (listed by
// the manifest) or non-finite states under --on-nonfinite skip (listed by its shard too).
struct SkippedSample {
  int64_t index = 0;
  int64_t line = 0;  // physical line of the JSONL input
  std::string reason;
};

struct CommittedShard {
  std::string file;
  int64_t shard_index = 0;
  std::vector<int64_t> samples;
  int64_t num_tokens = 0;
  uint64_t bytes = 0;
  std::string checksum;                // ContentHash of the file, hex; empty if not known
  std::vector<SkippedSample> skipped;  // samples of this shard left out for non-finite states
};

class ShardWriter {
 public:
  // `account` (optional) is told where the writing time goes; `threads` write a sample's states.
  ShardWriter(const std::filesystem::path& out_dir, int64_t shard_index, const ShardAttributes& attrs,
              WriteAccount* account = nullptr, int threads = 1);
  ~ShardWriter();  // removes the temporary file unless committed
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // `layers[k]` points at the sample's first row of capture k: [T] rows in the storage dtype
  // as the capture pipeline delivers them, each the codec's row_bytes long (fp8: codes then
  // scale); `finals[j]` likewise for the j-th of final_datasets(final_mode). The sample's
  // masked tokens are counted into the shard's /token_counts (written by close()).
  void write_sample(int64_t index, const std::string* id, const std::vector<int32_t>& input_ids,
                    const std::vector<uint8_t>& loss_mask, const std::vector<const void*>& layers,
                    const std::vector<const void*>& finals);
  // Records a sample of this shard that is left out (/skipped/<index> with its reason), so
  // that the shard itself says why the sample is missing.
  void skip_sample(const SkippedSample& skipped);
  // Closes, syncs and renames to the final name. Returns what the manifest records.
  CommittedShard commit();
  // commit() in two halves: close() ends the HDF5 file (on the thread that wrote it);
  // publish() syncs and renames it (any thread: no HDF5 call), so that a slow fsync can
  // overlap the writing of the next shard.
  void close();
  CommittedShard publish();

  int64_t shard_index() const { return shard_index_; }
  const ShardAttributes& attributes() const { return attrs_; }
  // File-system blocks reserved ahead of HDF5's writes (0 where the file system cannot).
  uint64_t reserved_bytes() const { return reserved_end_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }

 private:
  // Makes sure the next `bytes` that HDF5 appends cannot fail for lack of space. HDF5 1.10
  // cannot close a file after a failed write (and then crashes at exit), so a full disk must
  // be met here, with a clean error, and never inside HDF5. Blocks are reserved (fallocate)
  // only once the file system is nearly full.
  void reserve(uint64_t bytes);
  void release_reservation();
  // The datasets of one state of a sample (the codec's parts), from `blocks.size()` blocks of
  // rows in the storage dtype, stored token-major: rows [T, K] for hidden_states, [T] for a
  // final state.
  void write_state(hid_t group, const std::string& name, const std::vector<uint64_t>& rows,
                   const std::vector<const void*>& blocks);
  std::filesystem::path out_dir_;
  std::filesystem::path temp_path_;
  std::filesystem::path final_path_;
  int64_t shard_index_;
  ShardAttributes attrs_;
  const StorageCodec& codec_;  // of attrs_.dtype
  WriteAccount* account_;      // or none
  ParallelRowWriter rows_;     // the states' rows, into data_fd_
  std::vector<FinalDataset> finals_;
  H5Id file_;
  H5Id samples_group_;
  H5Id skipped_group_;  // created on the first skip_sample
  std::vector<H5Id> part_types_;  // the file type of each of the codec's parts
  H5Id state_dcpl_;               // creation properties of the states' datasets
  TokenCounter token_counts_;         // of the samples written (not of skipped ones)
  CommittedShard record_;
  bool committed_ = false;
  int data_fd_ = -1;        // the temporary file: fallocate, and the states' rows
  uint64_t reserved_end_ = 0;  // blocks allocated up to here (beyond the file's size)
  bool can_reserve_ = true;    // false where the file system has no fallocate
  bool reserving_ = false;     // the file system was found nearly full: reserve ahead
};

// The ContentHash of a whole file, hex; throws an output error naming it.
std::string file_checksum(const std::filesystem::path& path);

// fsync a file or directory by path; throws an output error naming it.
void fsync_path(const std::filesystem::path& path, bool directory);

}  // namespace e3::io

namespace e3::io {

struct InspectedShard {
  CommittedShard record;
  std::string run_fingerprint;
};
// Reads back what a committed shard holds (its index, samples, tokens, size and the run
// fingerprint it was written under). Throws an output error if it is not a readable shard.
InspectedShard inspect_shard(const std::filesystem::path& path);

}  // namespace e3::io
