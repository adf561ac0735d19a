// manifest.json: what an output directory holds, and the fingerprint of the run that made
// it. Written atomically (temporary file, fsync, rename), always last.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/shard_writer.h"

namespace e3::io {

// The settings that determine the output's content. A resume must match all of them.
struct RunFingerprint {
  std::string model_fingerprint;  // config.json and the checkpoint's tensor table
  std::vector<int32_t> layer_ids;
  std::string final_mode;
  std::string dtype;
  int64_t max_seq_len = 0;
  std::string on_long;
  int64_t samples_per_shard = 0;
  std::string tool_version;

  // One line per field that differs: "dtype: bf16 (in the directory) vs fp32 (this run)".
  std::vector<std::string> differences(const RunFingerprint& current) const;
  std::string digest() const;
};

struct SkippedSample {
  int64_t index = 0;
  int64_t line = 0;
  std::string reason;
};

struct Manifest {
  RunFingerprint fingerprint;
  std::string model_path;
  std::string data_path;
  std::string data_fingerprint;  // token counts per sample
  int64_t num_samples = 0;       // samples in the input
  int64_t num_shards = 0;        // shards the plan has in all
  bool complete = false;
  std::vector<CommittedShard> shards;
  std::vector<SkippedSample> skipped;
};

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kManifestFormat = "eagle3-hidden-states-manifest";

nlohmann::json to_json(const Manifest& m);
Manifest manifest_from_json(const nlohmann::json& j, const std::string& where);
void write_manifest(const std::filesystem::path& dir, const Manifest& m);
// nullopt when the directory has no manifest; throws an output error when it is unreadable.
std::optional<Manifest> read_manifest(const std::filesystem::path& dir);

}  // namespace e3::io
