// `eagle3_extract verify DIR`: checks an output directory against its manifest.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "io/manifest.h"
#include "core/error.h"

namespace e3::io {

struct VerifyReport {
  int64_t shards = 0;
  int64_t samples = 0;
  int64_t tokens = 0;
  int64_t skipped = 0;
  int64_t num_samples = 0;  // in the input
  int64_t parts = 1;        // manifests found
  int64_t part_count = 1;   // parts the dataset was cut into (--part I/P)
  int64_t unlisted = 0;     // whole shards committed after their manifest's last update
  bool complete = false;    // every part present and complete
  int64_t shards_read = 0;  // shards whose files this process read (its share)
  uint64_t bytes_read = 0;  // of those files
  double seconds = 0;       // wall time of the whole check
  // What the states are (from the first shard): one line per stored slot, naming its HF
  // output_hidden_states index and, for the final state, pre- or post-norm.
  std::vector<std::string> slots;
  std::string model_type, model_path;
  int64_t num_hidden_layers = 0, hidden_size = 0;
  // What the shards of this process's share were found to hold wrong, in shard order
  // (filled only with VerifyOptions::collect_problems).
  std::vector<Error> problems;
};

struct VerifyProgress {
  int64_t shards_done = 0, shards_total = 0;  // of this process's share
  uint64_t bytes_done = 0, bytes_total = 0;
  double seconds = 0;
  bool finished = false;  // the last call, once every shard of the share is read
};

// Where the time of reading shard files goes, in nanoseconds summed over the threads that read
// them (core/stage_timer.h).
struct ShardReadStages {
  std::atomic<uint64_t> read{0};      // the shard files' bytes, copied out by pread or from their mapping
  std::atomic<uint64_t> checksum{0};  // hashing them
  std::atomic<uint64_t> metadata{0};  // HDF5's calls (attributes, shapes, layout), waiting for its lock included
  std::atomic<uint64_t> values{0};    // the NaN/Inf and scale checks of the stored bits
};

// What uses a shard's bytes as verify reads them, so that they are read from SRC once (export
// converts each sample from the very buffers whose checksum and values verify checks). Verify
// reads the file once, in file order; the consumer's results must stay unpublished until
// passed(): a shard is known good only once its last byte is hashed.
class ShardConsumer {
 public:
  struct Want {
    uint64_t offset = 0, bytes = 0;  // in the shard file
    size_t group = 0;                // ready(group) once every want of it is in place
  };
  virtual ~ShardConsumer() = default;  // without passed(): discards what it made
  // Under the HDF5 lock (the caller's VerifyOptions::hdf5_lock, held: do not take it), after
  // verify's checks of the file's metadata passed: the byte ranges it wants. What it throws is
  // the shard's problem, reported only if verify finds none.
  virtual std::vector<Want> plan(const std::filesystem::path& path) = 0;
  // Where want `i`'s bytes go (bytes long), asked just before they are read; valid until its
  // group is ready.
  virtual void* place(size_t i) = 0;
  // Asked instead of place() when the shard is mapped (it was in the page cache): want `i`'s
  // bytes lie at `bytes` (read-only), valid until the consumer is destroyed. Returns whether the
  // consumer takes them from there; false: place() is asked for a copy.
  virtual bool lend(size_t /*i*/, const void* /*bytes*/) { return false; }
  // Every want of `group` is in place, and the values verify checks among them passed.
  virtual void ready(size_t group) = 0;
  // The whole shard passed every check (checksum, metadata, values): publish.
  virtual void passed() = 0;
};

struct VerifyOptions {
  int threads = 0;  // shards read at once; 0: the cores of this machine
  // A shard mostly in the page cache is mapped and checked where its bytes lie; false: it is
  // read with pread, as where the mapping fails.
  bool map_cached = true;
  // Under MPI each process reads the shards whose index % ranks == rank; the manifests are
  // checked whole by every process (they are small), so each can count the samples.
  int rank = 0, ranks = 1;
  // Return the problems found in shard files in VerifyReport::problems instead of throwing
  // the first: the caller reports every one (and combines them over ranks).
  bool collect_problems = false;
  double progress_interval_s = 5;
  std::function<void(const VerifyProgress&)> progress;  // called from another thread
  // Called on the reading thread for each shard of this process's share before it is read: the
  // consumer of its bytes (ShardConsumer), or null for none. What it or the consumer throws is
  // that shard's problem. Their HDF5 calls hold `hdf5_lock`, which then also serialises
  // verify's own (HDF5 is built without thread safety).
  std::function<std::unique_ptr<ShardConsumer>(const CommittedShard&, const std::filesystem::path&)> consumer;
  std::mutex* hdf5_lock = nullptr;
  ShardReadStages* stages = nullptr;  // where the pool's time goes, when set
};

// Checks every shard and sample: presence exactly once, shapes, dtypes, attributes, sizes,
// checksums and finiteness. Throws a verify error naming the first problem (problems of the
// manifests are always thrown; those inside shard files only without collect_problems).
// Shard files are read by a pool of threads: each file once, in file order, its checksum and its
// values checked on the same bytes, straight from the stored bits (no HDF5 type conversion).
VerifyReport verify_output(const std::filesystem::path& dir, const VerifyOptions& options = {});

// verify's checks of one shard file against `record` (what a manifest would list) under the
// settings `fp`: size, checksum (when the record has one), attributes, every sample's datasets
// and shapes, token counts and values. Throws a verify error naming the first problem.
void check_shard(const std::filesystem::path& path, const CommittedShard& record, const RunFingerprint& fp);

// The manifests of an output directory (one per --part), read and checked to come from one run
// (same part count, settings and input data); throws a verify error for a directory that is
// not an output, a manifest that cannot be read, or manifests of different runs.
std::vector<Manifest> read_run_manifests(const std::filesystem::path& dir);

// Throws a verify error saying how much of the dataset is there when `r` is not a complete
// run: a partial output must not pass for training data unless the user asked for that
// (--allow-incomplete).
void require_complete(const VerifyReport& r, const std::filesystem::path& dir);

// What a manifest says about itself, without opening a shard: every listed shard belongs to
// the manifest's part, is named after its shard_index and holds only samples of that index's
// range; no sample is listed twice (stored or skipped) or lies outside the input. `verify`
// and a rerun both rely on it, so that a rerun never calls complete what verify rejects.
// Throws an error of `kind` reading "WHERE: <problem><advice>".
void check_manifest_structure(const Manifest& m, const std::string& where, ErrorKind kind,
                              std::string_view advice = {});

}  // namespace e3::io
