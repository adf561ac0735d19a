// Where the time of the path from the device to the shard files goes, stage by stage, so that a
// run that is slower than its compute says why (issue 21). Stages are timed on whichever thread
// runs them (writer, publisher, step loop) and summed; the report is one log line per writer.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "core/stage_timer.h"

namespace e3::io {

enum class WriteStage {
  DeviceWait,  // the writer waiting for a step's copy from the device (it is ahead)
  DeviceCopy,  // the step's device-to-host copies themselves (on a copy stream, beside the compute)
  Scan,        // the NaN/Inf check of the stored rows
  DataWrite,   // the sample's rows into the file (interleaved: hidden_states is [T, K, H])
  Metadata,    // HDF5 groups, dataset headers and attributes of a sample
  Close,       // the token counts, HDF5 flush and close of a shard
  Checksum,    // reading a closed shard back for its manifest checksum
  Sync,        // the shard's writeback to the disk, its fsync and the directory's, and the rename
};
inline constexpr size_t kWriteStages = 8;

class WriteAccount {
 public:
  std::atomic<uint64_t>& counter(WriteStage s) { return ns_[static_cast<size_t>(s)]; }
  void add(WriteStage s, std::chrono::steady_clock::duration d) {
    ns_[static_cast<size_t>(s)].fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()),
                                          std::memory_order_relaxed);
  }
  void add_bytes(uint64_t n) { bytes_.fetch_add(n, std::memory_order_relaxed); }
  double seconds(WriteStage s) const { return static_cast<double>(ns_[static_cast<size_t>(s)].load()) * 1e-9; }
  uint64_t bytes() const { return bytes_.load(); }
  // "30.84 GB of states; writer thread busy 11.4 s (NaN/Inf scan 0.8 s, data writes ...), waiting for the device
  // 14.0 s: the device sets the pace; publisher: ...". The device's work is queued ahead of the
  // host, so the writer waiting for it (not the step loop waiting for a slot) tells which side
  // is slower.
  std::string summary() const;

 private:
  std::array<std::atomic<uint64_t>, kWriteStages> ns_{};
  std::atomic<uint64_t> bytes_{0};
};

// Times a scope into an account's stage (no account: not timed).
class StageTimer : public ScopeTimer {
 public:
  StageTimer(WriteAccount* account, WriteStage stage) : ScopeTimer(account ? &account->counter(stage) : nullptr) {}
};

}  // namespace e3::io
