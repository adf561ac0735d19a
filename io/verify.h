// `eagle3_extract verify DIR`: checks an output directory against its manifest.
#pragma once

#include <cstdint>
#include <filesystem>

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
};

// Checks every shard and sample: presence exactly once, shapes, dtypes, attributes, sizes
// and finiteness. Throws a verify error naming the first problem.
VerifyReport verify_output(const std::filesystem::path& dir);

}  // namespace e3::io
