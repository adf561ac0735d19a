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
  uint64_t shard_size = 0;   // --shard-size in bytes
  int64_t plan_groups = 0;   // DP groups x parts of the run that first planned the directory
  std::string tool_version;
  // The tokenizer, chat template and --mask that made the ids of the input's text lines; empty
  // for an input of token ids only (and then absent from the manifest, as before text lines).
  std::string chat_fingerprint;

  // One line per field that differs: "dtype: bf16 (in the directory) vs fp32 (this run)".
  std::vector<std::string> differences(const RunFingerprint& current) const;
  std::string digest() const;
};

// The attributes of the shards of the run `fp`: its layer ids, final mode, dtype and tool
// version, its digest as run_fingerprint, and the model's attributes.
ShardAttributes shard_attributes(const RunFingerprint& fp, const ModelAttributes& model);

// One job's slice of the dataset when several jobs write into one directory (--part I/P):
// the shards whose index % count == index. Each part keeps its own manifest.
struct Part {
  int index = 0;
  int count = 1;
  bool owns(int64_t shard_index) const { return shard_index % count == index; }
  bool operator==(const Part&) const = default;
};

struct Manifest {
  RunFingerprint fingerprint;
  Part part;
  std::string model_path;
  std::string data_path;
  std::string data_fingerprint;  // token counts per sample
  // Each sample's id, input_ids and loss_mask (after tokenizing); empty in manifests of
  // versions before it, which are not compared.
  std::string data_content_fingerprint;
  // The bytes of the weights the ranks read (model/weight_fingerprint.h); empty until a run
  // has loaded the model into this directory (and in manifests of versions before it).
  std::string weights_fingerprint;
  int64_t num_samples = 0;       // samples in the input
  int64_t num_shards = 0;        // shards of this part
  // The first sample of every shard of the plan (every part's), in shard index order: shard i
  // holds samples [shard_starts[i], shard_starts[i + 1]) (the last one up to num_samples). Shards
  // are cut by bytes, so this is what says which shard a sample belongs in. Empty in manifests
  // of versions before --shard-size, whose shard i held [i * samples_per_shard, ...).
  std::vector<int64_t> shard_starts;
  bool complete = false;         // every shard of this part is committed
  std::vector<CommittedShard> shards;
  std::vector<SkippedSample> skipped;  // this part's samples that are not stored, with reasons
};

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kManifestFormat = "eagle3-hidden-states-manifest";

// "manifest.json" for a single job, "manifest.part-0003-of-0008.json" for part 3 of 8.
std::string manifest_name(const Part& part);
// The manifests in a directory (of one job or of several parts), in name order.
std::vector<std::filesystem::path> list_manifests(const std::filesystem::path& dir);

// The committed shards as the manifest lists them (its "shards" array); the writers' commits
// reach the leader in this form too. shards_from_json throws an output error naming `where`.
nlohmann::json shards_to_json(const std::vector<CommittedShard>& shards);
std::vector<CommittedShard> shards_from_json(const nlohmann::json& list, const std::string& where);

nlohmann::json to_json(const Manifest& m);
Manifest manifest_from_json(const nlohmann::json& j, const std::string& where);
// Atomically replaces the manifest of m.part.
void write_manifest(const std::filesystem::path& dir, const Manifest& m);
// nullopt when the directory has no manifest for `part`; throws an output error when it is
// unreadable.
std::optional<Manifest> read_manifest(const std::filesystem::path& dir, const Part& part = {});
Manifest read_manifest_file(const std::filesystem::path& path);

}  // namespace e3::io
