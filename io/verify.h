// `eagle3_extract verify DIR`: checks an output directory against its manifest.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "io/manifest.h"
#include "kernels/error.h"

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
