#include "io/manifest.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "core/named_enum.h"
#include "core/json_read.h"

namespace e3::io {

using nlohmann::json;

namespace {

json fingerprint_json(const RunFingerprint& f) {
  json j{{"model_fingerprint", f.model_fingerprint}, {"layer_ids", f.layer_ids},
              {"final", f.final_mode},                    {"dtype", f.dtype},
              {"max_seq_len", f.max_seq_len},             {"on_long", f.on_long},
              {"samples_per_shard", f.samples_per_shard}, {"shard_size", f.shard_size},
              {"plan_groups", f.plan_groups},             {"tool_version", f.tool_version}};
  if (!f.chat_fingerprint.empty()) j["chat_fingerprint"] = f.chat_fingerprint;
  return j;
}

template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  E3_REQUIRE(j.is_object() && j.contains(key), ErrorKind::Output, "{}: missing \"{}\"", where, key);
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    E3_THROW(ErrorKind::Output, "{}: \"{}\" has the wrong type: {}", where, key, e.what());
  }
}

}  // namespace

std::vector<std::string> RunFingerprint::differences(const RunFingerprint& cur) const {
  std::vector<std::string> d;
  auto cmp = [&](const char* name, const auto& was, const auto& now) {
    if (was != now) d.push_back(fmt::format("{}: {} (in the directory) vs {} (this run)", name, was, now));
  };
  cmp("model", model_fingerprint, cur.model_fingerprint);
  if (layer_ids != cur.layer_ids)
    d.push_back(fmt::format("layers: [{}] (in the directory) vs [{}] (this run)", fmt::join(layer_ids, ","),
                            fmt::join(cur.layer_ids, ",")));
  cmp("final", final_mode, cur.final_mode);
  cmp("dtype", dtype, cur.dtype);
  cmp("max-seq-len", max_seq_len, cur.max_seq_len);
  cmp("on-long", on_long, cur.on_long);
  cmp("samples-per-shard", samples_per_shard, cur.samples_per_shard);
  cmp("shard-size", shard_size, cur.shard_size);
  cmp("plan groups (DP groups x parts of the first run)", plan_groups, cur.plan_groups);
  cmp("tool version", tool_version, cur.tool_version);
  auto shown = [](const std::string& f) { return f.empty() ? std::string("none (token ids only)") : f; };
  if (chat_fingerprint != cur.chat_fingerprint)
    d.push_back(fmt::format("tokenizer, chat template and --mask: {} (in the directory) vs {} (this run)",
                            shown(chat_fingerprint), shown(cur.chat_fingerprint)));
  return d;
}

std::string RunFingerprint::digest() const { return Fnv1a().update(fingerprint_json(*this).dump()).hex(); }

ShardAttributes shard_attributes(const RunFingerprint& fp, const ModelAttributes& model) {
  ShardAttributes a;
  static_cast<ModelAttributes&>(a) = model;
  a.layer_ids = fp.layer_ids;
  a.final_mode = fp.final_mode;
  a.dtype = parse_named<DType>(fp.dtype, "dtype");
  a.run_fingerprint = fp.digest();
  a.tool_version = fp.tool_version;
  return a;
}

std::string manifest_name(const Part& part) {
  if (part.count == 1) return kManifestName;
  return fmt::format("manifest.part-{:04d}-of-{:04d}.json", part.index, part.count);
}

std::vector<std::filesystem::path> list_manifests(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool single = name == kManifestName;
    const bool part = name.rfind("manifest.part-", 0) == 0 && entry.path().extension() == ".json";
    if (single || part) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

json skipped_json(const std::vector<SkippedSample>& list) {
  json out = json::array();
  for (const SkippedSample& s : list) out.push_back(json{{"index", s.index}, {"line", s.line}, {"reason", s.reason}});
  return out;
}

std::vector<SkippedSample> skipped_from_json(const json& list, const std::string& where) {
  std::vector<SkippedSample> out;
  for (const json& s : list)
    out.push_back({field<int64_t>(s, "index", where), field<int64_t>(s, "line", where),
                   field<std::string>(s, "reason", where)});
  return out;
}

std::vector<CommittedShard> parse_shards(const json& list, const std::string& where) {
  std::vector<CommittedShard> out;
  for (const json& s : list) {
    CommittedShard c;
    c.file = field<std::string>(s, "file", where);
    // A rerun renames and removes files by these names: one that is not a bare name could reach
    // outside --out.
    E3_REQUIRE(is_plain_file_name(c.file), ErrorKind::Output,
               "{}: shard entry {} has \"file\": \"{}\", which is not a file name in the output directory (no "
               "'/' or '..')", where, out.size(), clip(c.file));
    c.shard_index = field<int64_t>(s, "shard_index", where);
    c.samples = field<std::vector<int64_t>>(s, "samples", where);
    c.num_tokens = field<int64_t>(s, "num_tokens", where);
    c.bytes = field<uint64_t>(s, "bytes", where);
    if (s.contains("skipped")) c.skipped = skipped_from_json(s.at("skipped"), where);
    if (s.contains("checksum")) c.checksum = field<std::string>(s, "checksum", where);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

json shards_to_json(const std::vector<CommittedShard>& shards) {
  json out = json::array();
  for (const CommittedShard& s : shards) {
    json j{{"file", s.file},
           {"shard_index", s.shard_index},
           {"samples", s.samples},
           {"num_samples", s.samples.size()},
           {"num_tokens", s.num_tokens},
           {"bytes", s.bytes}};
    if (!s.checksum.empty()) j["checksum"] = s.checksum;
    if (!s.skipped.empty()) j["skipped"] = skipped_json(s.skipped);
    out.push_back(std::move(j));
  }
  return out;
}

std::vector<CommittedShard> shards_from_json(const json& list, const std::string& where) {
  try {
    return parse_shards(list, where);
  } catch (const json::exception& e) {
    E3_THROW(ErrorKind::Output, "{}: {}", where, clip(e.what(), 200));
  }
}

json to_json(const Manifest& m) {
  json j{{"format", kManifestFormat},
         {"format_version", 1},
         {"part_index", m.part.index},
         {"part_count", m.part.count},
         {"fingerprint", fingerprint_json(m.fingerprint)},
         {"run_fingerprint", m.fingerprint.digest()},
         {"model_path", m.model_path},
         {"data_path", m.data_path},
         {"data_fingerprint", m.data_fingerprint},
         {"num_samples", m.num_samples},
         {"num_shards", m.num_shards},
         {"shard_starts", m.shard_starts},
         {"complete", m.complete},
         {"shards", shards_to_json(m.shards)},
         {"skipped", skipped_json(m.skipped)}};
  if (!m.data_content_fingerprint.empty()) j["data_content_fingerprint"] = m.data_content_fingerprint;
  if (!m.weights_fingerprint.empty()) j["weights_fingerprint"] = m.weights_fingerprint;
  return j;
}

namespace {

Manifest parse_manifest(const json& j, const std::string& where) {
  E3_REQUIRE(j.is_object() && j.value("format", "") == kManifestFormat, ErrorKind::Output,
             "{}: not an eagle3_extract manifest", where);
  Manifest m;
  const json f = field<json>(j, "fingerprint", where);
  m.fingerprint.model_fingerprint = field<std::string>(f, "model_fingerprint", where);
  m.fingerprint.layer_ids = field<std::vector<int32_t>>(f, "layer_ids", where);
  m.fingerprint.final_mode = field<std::string>(f, "final", where);
  m.fingerprint.dtype = field<std::string>(f, "dtype", where);
  m.fingerprint.max_seq_len = field<int64_t>(f, "max_seq_len", where);
  m.fingerprint.on_long = field<std::string>(f, "on_long", where);
  m.fingerprint.samples_per_shard = field<int64_t>(f, "samples_per_shard", where);
  // Absent from manifests of versions before --shard-size: 0, which no run has, so such a
  // directory is refused as another run's, naming these fields.
  m.fingerprint.shard_size = f.contains("shard_size") ? field<uint64_t>(f, "shard_size", where) : 0;
  m.fingerprint.plan_groups = f.contains("plan_groups") ? field<int64_t>(f, "plan_groups", where) : 0;
  m.fingerprint.tool_version = field<std::string>(f, "tool_version", where);
  if (f.contains("chat_fingerprint")) m.fingerprint.chat_fingerprint = field<std::string>(f, "chat_fingerprint", where);
  m.part.index = j.contains("part_index") ? field<int>(j, "part_index", where) : 0;
  m.part.count = j.contains("part_count") ? field<int>(j, "part_count", where) : 1;
  E3_REQUIRE(m.part.count >= 1 && m.part.index >= 0 && m.part.index < m.part.count, ErrorKind::Output,
             "{}: bad part {}/{}", where, m.part.index, m.part.count);
  m.model_path = field<std::string>(j, "model_path", where);
  m.data_path = field<std::string>(j, "data_path", where);
  m.data_fingerprint = field<std::string>(j, "data_fingerprint", where);
  if (j.contains("data_content_fingerprint"))
    m.data_content_fingerprint = field<std::string>(j, "data_content_fingerprint", where);
  if (j.contains("weights_fingerprint")) m.weights_fingerprint = field<std::string>(j, "weights_fingerprint", where);
  m.num_samples = field<int64_t>(j, "num_samples", where);
  m.num_shards = field<int64_t>(j, "num_shards", where);
  if (j.contains("shard_starts")) m.shard_starts = field<std::vector<int64_t>>(j, "shard_starts", where);
  m.complete = field<bool>(j, "complete", where);
  m.shards = parse_shards(field<json>(j, "shards", where), where);
  m.skipped = skipped_from_json(field<json>(j, "skipped", where), where);
  return m;
}

}  // namespace

Manifest manifest_from_json(const json& j, const std::string& where) {
  try {
    return parse_manifest(j, where);
  } catch (const json::exception& e) {
    // A value of an unexpected type (a string part_index...): still an output error naming the file.
    E3_THROW(ErrorKind::Output, "{}: {}", where, clip(e.what(), 200));
  }
}

void write_manifest(const std::filesystem::path& dir, const Manifest& m) {
  const auto final_path = dir / manifest_name(m.part);
  const auto temp_path = dir / fmt::format("{}.tmp.{}", manifest_name(m.part), ::getpid());
  {
    std::ofstream out(temp_path, std::ios::trunc);
    E3_REQUIRE(out.good(), ErrorKind::Output, "cannot write {}", temp_path.string());
    out << to_json(m).dump(1) << '\n';
    out.flush();
    E3_REQUIRE(out.good(), ErrorKind::Output, "writing {} failed (disk full?)", temp_path.string());
  }
  fsync_path(temp_path, false);
  std::error_code ec;
  std::filesystem::rename(temp_path, final_path, ec);
  E3_REQUIRE(!ec, ErrorKind::Output, "renaming {} to {}: {}", temp_path.string(), final_path.string(), ec.message());
  fsync_path(dir, true);
}

std::optional<Manifest> read_manifest(const std::filesystem::path& dir, const Part& part) {
  const auto path = dir / manifest_name(part);
  if (!std::filesystem::exists(path)) return std::nullopt;
  Manifest m = read_manifest_file(path);
  E3_REQUIRE(m.part == part, ErrorKind::Output, "{}: says it is part {}/{}", path.string(), m.part.index,
             m.part.count);
  return m;
}

Manifest read_manifest_file(const std::filesystem::path& path) {
  return manifest_from_json(read_json_file(path, ErrorKind::Output), path.string());
}

}  // namespace e3::io
