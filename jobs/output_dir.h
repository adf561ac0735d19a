// Preparing --out on the leader: create it, prove it writable, refuse a different run's
// directory, clean what a killed run left, and find the shards already committed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/manifest.h"
#include "jobs/dir_lock.h"

namespace e3::jobs {

// The leader's hold on --out (or on its --part) for the whole job: the directory created if
// needed, its lock taken, and a file written to prove it writable. A start that fails
// before keep() leaves nothing: the lock file goes, and directories this claim created are
// removed again when empty.
class OutputClaim {
 public:
  static OutputClaim take(const std::filesystem::path& out, const io::Part& part, const LockOptions& options = {});

  OutputClaim(OutputClaim&& other) noexcept;
  OutputClaim& operator=(OutputClaim&&) noexcept = delete;
  OutputClaim(const OutputClaim&) = delete;
  OutputClaim& operator=(const OutputClaim&) = delete;
  ~OutputClaim();

  // The directory now holds this run's output: keep it whatever happens next.
  void keep() { keep_ = true; }
  const DirLock& lock() const { return *lock_; }

 private:
  explicit OutputClaim(std::vector<std::filesystem::path> created);

  std::vector<std::filesystem::path> created_;  // outermost first
  std::optional<DirLock> lock_;
  bool keep_ = false;
};

struct OutputState {
  std::vector<io::CommittedShard> committed;  // shards to keep
  int64_t temps_removed = 0;                  // partial files of a killed run
  int64_t invalid_moved = 0;                  // unreadable or altered final-named shards, moved aside
  bool manifest_current = false;              // the manifest says complete and lists every kept shard
  std::string weights_fingerprint;            // the manifest's, kept until this run's is known
};

// The caller holds the OutputClaim of `out` and `part`: temporary files are removed here.
// With several parts sharing `out`, only this part's manifest, shards and temporary files
// are touched: the other parts may be running right now.
// With check_checksums, every shard the manifest lists is read back and compared with the
// manifest's checksum (sizes alone are compared otherwise); one that differs is moved aside
// and written again. `data_content` (Dataset::content_fingerprint) is compared with a manifest
// that records one. A shard not in the manifest is kept only after verify's full check of
// its schema and data (moved aside otherwise).
OutputState prepare_output_dir(const std::filesystem::path& out, const io::RunFingerprint& fp,
                               const std::string& data_fingerprint, const io::Part& part = {},
                               bool check_checksums = false, const std::string& data_content = {});

// Leader, after loading and before the first write: throws an output error when a manifest in
// `out` (this part's or another's) records weights other than `weights` (the fingerprint of
// the bytes this run read).
void check_weights_unchanged(const std::filesystem::path& out, const std::string& weights);

// Bytes the shards of `tokens` tokens in `samples` samples and `shards` shards take on disk.
uint64_t estimate_output_bytes(int64_t tokens, int64_t samples, int64_t shards, int64_t state_bytes_per_token);
// Throws an output error naming `out` when its file system has less than `need` bytes free.
void check_free_space(const std::filesystem::path& out, uint64_t need);

// The shard index in "shard-000042.h5" or "shard-000042.h5.tmp.<pid>"; nullopt for other names
// (and for an index too large to be one).
std::optional<int64_t> shard_index_of(const std::string& file_name);

}  // namespace e3::jobs
