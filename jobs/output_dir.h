// Preparing --out on the leader: create it, prove it writable, refuse a different run's
// directory, clean what a killed run left, and find the shards already committed.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "io/manifest.h"

namespace e3::jobs {

struct OutputState {
  std::vector<io::CommittedShard> committed;  // shards to keep
  int64_t temps_removed = 0;                  // partial files of a killed run
  int64_t invalid_moved = 0;                  // unreadable final-named shards, moved aside
};

OutputState prepare_output_dir(const std::filesystem::path& out, const io::RunFingerprint& fp,
                               const std::string& data_fingerprint);

}  // namespace e3::jobs
