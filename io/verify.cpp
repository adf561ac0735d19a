#include "io/verify.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "io/hdf5.h"
#include "io/manifest.h"
#include "io/shard_writer.h"

namespace e3::io {
namespace {

#define E3_VERIFY(cond, ...) E3_REQUIRE(cond, ::e3::ErrorKind::Verify, __VA_ARGS__)

struct DatasetShape {
  std::vector<hsize_t> dims;
  H5Id type;
};

DatasetShape shape_of(hid_t ds) {
  DatasetShape s;
  H5Id space(E3_H5(H5Dget_space(ds), "H5Dget_space"), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  s.dims.resize(static_cast<size_t>(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space.get(), s.dims.data(), nullptr);
  s.type = H5Id(E3_H5(H5Dget_type(ds), "H5Dget_type"), H5Tclose);
  return s;
}

H5Id open_dataset(hid_t group, const char* name, const std::string& where) {
  E3_VERIFY(H5Lexists(group, name, H5P_DEFAULT) > 0, "{}: dataset '{}' is missing", where, name);
  return H5Id(E3_H5(H5Dopen2(group, name, H5P_DEFAULT), "{}: opening {}", where, name), H5Dclose);
}

// Reads a float dataset and checks every value is finite.
void check_finite(hid_t ds, size_t n, const std::string& where, const char* name, std::vector<float>& buf) {
  buf.resize(n);
  E3_H5(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "{}: reading {}", where, name);
  for (size_t i = 0; i < n; ++i)
    E3_VERIFY(std::isfinite(buf[i]), "{}: {} has a non-finite value ({}) at flat index {}", where, name, buf[i], i);
}

// The checks of one directory, shard by shard, remembering where each sample was seen.
class Verifier {
 public:
  Verifier(std::filesystem::path dir, const Manifest& first) : dir_(std::move(dir)), fp_(first.fingerprint) {
    if (fp_.dtype == "bf16") want_dtype_ = kernels::DType::BF16;
    if (fp_.dtype == "fp16") want_dtype_ = kernels::DType::F16;
    if (fp_.dtype == "fp32") want_dtype_ = kernels::DType::F32;
    if (fp_.dtype == "fp8") want_dtype_ = kernels::DType::F8E4M3;
    E3_VERIFY(want_dtype_.has_value(), "{}: unknown dtype '{}'", kManifestName, fp_.dtype);
    want_final_ = fp_.final_mode != "none";
    K_ = fp_.layer_ids.size();
    report_.num_samples = first.num_samples;
    report_.part_count = first.part.count;
    report_.parts = 0;
  }

  void manifest(const Manifest& m) {
    const std::string manifest_file = manifest_name(m.part);
    ++report_.parts;
    part_complete_[m.part.index] = m.complete;
    all_complete_ = all_complete_ && m.complete;
    for (const SkippedSample& sk : m.skipped) note_skipped(sk, manifest_file);
    for (const CommittedShard& s : m.shards) {
      E3_VERIFY(m.part.owns(s.shard_index), "{}: lists {}, which belongs to another part", manifest_file, s.file);
      shard(s);
    }
  }

  VerifyReport finish() {
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() != ".h5" || listed_.count(name)) continue;
      unlisted(entry.path());
    }
    for (const auto& [index, where] : skipped_in_) {
      E3_VERIFY(!where_seen_.count(index), "sample {:08d} is listed as skipped ({}) but is stored in {}", index, where,
                where_seen_[index]);
      ++report_.skipped;
    }
    report_.complete = all_complete_ && report_.parts == report_.part_count && report_.unlisted == 0;
    if (report_.complete) {
      E3_VERIFY(report_.samples + report_.skipped == report_.num_samples,
                "the manifest says complete, but {} stored + {} skipped != {} input samples", report_.samples,
                report_.skipped, report_.num_samples);
      for (int64_t i = 0; i < report_.num_samples; ++i)
        E3_VERIFY(where_seen_.count(i) || skipped_in_.count(i), "sample {:08d} is neither stored nor listed as skipped",
                  i);
    }
    return report_;
  }

 private:
  void note_skipped(const SkippedSample& sk, const std::string& where) {
    auto [it, fresh] = skipped_in_.emplace(sk.index, where);
    E3_VERIFY(fresh, "sample {:08d} is listed as skipped twice: in {} and {}", sk.index, it->second, where);
    E3_VERIFY(sk.index >= 0 && sk.index < report_.num_samples, "{}: skipped sample {} is outside the input", where,
              sk.index);
  }

  // A final-named shard that no manifest lists: committed after its job's last manifest
  // update (a kill, or another DP group's shard before the job's end). A rerun adopts it,
  // so it must be whole and of this run; in a part whose manifest says complete it is stray.
  void unlisted(const std::filesystem::path& path) {
    const std::string where = path.string();
    InspectedShard found;
    try {
      found = inspect_shard(path);
    } catch (const Error& e) {
      E3_THROW(ErrorKind::Verify, "{} (a shard file that no manifest lists)", e.what());
    }
    const int part = static_cast<int>(found.record.shard_index % report_.part_count);
    const auto it = part_complete_.find(part);
    E3_VERIFY(it == part_complete_.end() || !it->second, "{}: a shard file that no manifest lists", where);
    E3_VERIFY(found.run_fingerprint == fp_.digest(), "{}: not listed, and written by a run with other settings", where);
    E3_VERIFY(path.filename() == shard_file_name(found.record.shard_index), "{}: its shard_index says it is {}", where,
              shard_file_name(found.record.shard_index));
    shard(found.record);
    ++report_.unlisted;
  }

  void shard(const CommittedShard& s) {
    const auto path = dir_ / s.file;
    const std::string where = path.string();
    E3_VERIFY(listed_.insert(s.file).second, "{}: listed by two manifests", where);
    E3_VERIFY(std::filesystem::exists(path), "{}: listed in the manifest but missing", where);
    const uint64_t size = std::filesystem::file_size(path);
    E3_VERIFY(size == s.bytes, "{}: {} bytes, the manifest says {} (truncated or rewritten)", where, size, s.bytes);
    if (!s.checksum.empty()) {
      const std::string sum = file_checksum(path);
      E3_VERIFY(sum == s.checksum, "{}: checksum {} differs from the manifest's {} (changed after it was written)",
                where, sum, s.checksum);
    }
    const H5Id fapl = file_access_list();  // kept open: closing it would clear the error stack
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    E3_VERIFY(static_cast<bool>(file), "{}: not a readable HDF5 file: {}", where, hdf5_error_text());
    const hid_t f = file.get();
    E3_VERIFY(read_attr_string(f, "format") == std::string(kFormatName), "{}: attribute format is not '{}'", where,
              kFormatName);
    E3_VERIFY(read_attr_int(f, "format_version") == kFormatVersion, "{}: unexpected format_version", where);
    const auto layer_ids = read_attr_ints(f, "layer_ids");
    E3_VERIFY(layer_ids == fp_.layer_ids, "{}: layer_ids [{}] differ from the manifest's [{}]", where,
              fmt::join(layer_ids.value_or(std::vector<int32_t>{}), ","), fmt::join(fp_.layer_ids, ","));
    E3_VERIFY(read_attr_string(f, "final") == fp_.final_mode, "{}: attribute final differs from the manifest", where);
    E3_VERIFY(read_attr_string(f, "dtype") == fp_.dtype, "{}: attribute dtype differs from the manifest", where);
    E3_VERIFY(read_attr_int(f, "shard_index") == s.shard_index, "{}: shard_index differs from the manifest", where);
    const auto hidden = read_attr_int(f, "hidden_size");
    E3_VERIFY(hidden && *hidden > 0, "{}: missing hidden_size", where);

    E3_VERIFY(H5Lexists(f, "samples", H5P_DEFAULT) > 0, "{}: no /samples group", where);
    H5Id samples(E3_H5(H5Gopen2(f, "samples", H5P_DEFAULT), "{}: opening /samples", where), H5Gclose);
    std::vector<std::string> names = list_links(samples.get(), where);
    std::set<std::string> expected;
    for (int64_t idx : s.samples) expected.insert(fmt::format("{:08d}", idx));
    for (const std::string& n : names)
      E3_VERIFY(expected.count(n), "{}: sample {} is in the file but not in the manifest", where, n);
    int64_t tokens = 0;
    for (int64_t idx : s.samples) {
      const std::string key = fmt::format("{:08d}", idx);
      E3_VERIFY(std::find(names.begin(), names.end(), key) != names.end(), "{} sample {}: missing", where, key);
      E3_VERIFY(idx >= 0 && idx < report_.num_samples, "{}: holds sample {}, but the input has {} samples", where, idx,
                report_.num_samples);
      auto [it, fresh] = where_seen_.emplace(idx, where);
      E3_VERIFY(fresh, "sample {:08d} appears twice: in {} and {}", idx, it->second, where);
      H5Id g(E3_H5(H5Gopen2(samples.get(), key.c_str(), H5P_DEFAULT), "{}: opening sample {}", where, key), H5Gclose);
      tokens += sample(g.get(), fmt::format("{} sample {}", where, key), static_cast<hsize_t>(*hidden));
      ++report_.samples;
    }
    E3_VERIFY(tokens == s.num_tokens, "{}: {} tokens, the manifest says {}", where, tokens, s.num_tokens);
    // Samples left out for non-finite states: the shard and the manifest must agree.
    std::vector<std::string> in_file;
    if (H5Lexists(f, "skipped", H5P_DEFAULT) > 0) {
      H5Id skipped(E3_H5(H5Gopen2(f, "skipped", H5P_DEFAULT), "{}: opening /skipped", where), H5Gclose);
      in_file = list_links(skipped.get(), where);
    }
    std::vector<std::string> in_manifest;
    for (const SkippedSample& sk : s.skipped) {
      note_skipped(sk, where);
      in_manifest.push_back(fmt::format("{:08d}", sk.index));
    }
    std::sort(in_manifest.begin(), in_manifest.end());
    E3_VERIFY(in_file == in_manifest, "{}: /skipped holds [{}], the manifest lists [{}]", where,
              fmt::join(in_file, ","), fmt::join(in_manifest, ","));
    report_.tokens += tokens;
    ++report_.shards;
  }

  // Checks one /samples/<index> group; returns its token count.
  int64_t sample(hid_t group, const std::string& sw, hsize_t H) {
    const hid_t g = group;
    const hsize_t K = K_;
    H5Id ids = open_dataset(g, "input_ids", sw);
    DatasetShape ids_shape = shape_of(ids.get());
    E3_VERIFY(ids_shape.dims.size() == 1 && ids_shape.dims[0] > 0 && H5Tget_class(ids_shape.type.get()) == H5T_INTEGER,
              "{}: input_ids must be a non-empty 1-D integer dataset", sw);
    const hsize_t T = ids_shape.dims[0];
    E3_VERIFY(read_attr_int(g, "num_tokens") == static_cast<int64_t>(T), "{}: num_tokens attribute is not {}",
              sw, T);
    H5Id mask = open_dataset(g, "loss_mask", sw);
    DatasetShape mask_shape = shape_of(mask.get());
    E3_VERIFY(mask_shape.dims == std::vector<hsize_t>{T} && H5Tget_class(mask_shape.type.get()) == H5T_INTEGER,
              "{}: loss_mask must be [{}] integers", sw, T);

    H5Id hs = open_dataset(g, "hidden_states", sw);
    DatasetShape hs_shape = shape_of(hs.get());
    E3_VERIFY(hs_shape.dims == (std::vector<hsize_t>{T, K, H}), "{}: hidden_states has shape [{}], expected [{}, {}, {}]",
              sw, fmt::join(hs_shape.dims, ", "), T, K, H);
    E3_VERIFY(storage_dtype_of(hs_shape.type.get()) == want_dtype_, "{}: hidden_states is not stored as {}", sw,
              fp_.dtype);
    check_states(g, hs.get(), "hidden_states", {T, K}, H, sw);

    const bool has_last = H5Lexists(g, "last_hidden_state", H5P_DEFAULT) > 0;
    E3_VERIFY(has_last == want_final_, "{}: last_hidden_state is {} but --final is {}", sw,
              has_last ? "present" : "absent", fp_.final_mode);
    if (has_last) {
      H5Id last = open_dataset(g, "last_hidden_state", sw);
      DatasetShape last_shape = shape_of(last.get());
      E3_VERIFY(last_shape.dims == (std::vector<hsize_t>{T, H}), "{}: last_hidden_state has shape [{}], expected [{}, {}]",
                sw, fmt::join(last_shape.dims, ", "), T, H);
      E3_VERIFY(storage_dtype_of(last_shape.type.get()) == want_dtype_, "{}: last_hidden_state is not stored as {}", sw,
                fp_.dtype);
      check_states(g, last.get(), "last_hidden_state", {T}, H, sw);
    }
    return static_cast<int64_t>(T);
  }

  // Every stored value finite. fp8 (uint8 codes): the encoding attribute, no NaN code, and a
  // NAME_scale dataset of shape `rows` (the state's shape without H), finite and >= 0.
  void check_states(hid_t g, hid_t ds, const char* name, const std::vector<hsize_t>& rows, hsize_t H,
                    const std::string& sw) {
    size_t n = 1;
    for (hsize_t d : rows) n *= d;
    if (want_dtype_ != kernels::DType::F8E4M3) return check_finite(ds, n * H, sw, name, buf_);
    E3_VERIFY(read_attr_string(ds, "encoding") == std::string(kFp8Encoding), "{}: {} has no encoding attribute '{}'",
              sw, name, kFp8Encoding);
    std::vector<uint8_t> codes(n * H);
    E3_H5(H5Dread(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, codes.data()), "{}: reading {}", sw, name);
    for (size_t i = 0; i < codes.size(); ++i)
      E3_VERIFY((codes[i] & 0x7f) != 0x7f, "{}: {} holds the e4m3fn NaN code at flat index {}", sw, name, i);
    const std::string scale_name = std::string(name) + "_scale";
    H5Id scale = open_dataset(g, scale_name.c_str(), sw);
    DatasetShape shape = shape_of(scale.get());
    E3_VERIFY(shape.dims == rows && storage_dtype_of(shape.type.get()) == kernels::DType::F32,
              "{}: {} must be float32 [{}], not [{}]", sw, scale_name, fmt::join(rows, ", "), fmt::join(shape.dims, ", "));
    check_finite(scale.get(), n, sw, scale_name.c_str(), buf_);
    for (size_t i = 0; i < n; ++i)
      E3_VERIFY(buf_[i] >= 0, "{}: {} is negative ({}) at flat index {}", sw, scale_name, buf_[i], i);
  }

  std::filesystem::path dir_;
  RunFingerprint fp_;
  std::optional<kernels::DType> want_dtype_;
  bool want_final_ = true;
  hsize_t K_ = 0;
  VerifyReport report_{};
  bool all_complete_ = true;
  std::map<int, bool> part_complete_;  // part index -> its manifest says complete
  std::map<int64_t, std::string> where_seen_;  // stored sample -> its shard
  std::map<int64_t, std::string> skipped_in_;  // skipped sample -> where it is listed
  std::set<std::string> listed_;               // shard files named by a manifest
  std::vector<float> buf_;
};

}  // namespace

VerifyReport verify_output(const std::filesystem::path& dir) {
  silence_hdf5_errors();
  E3_VERIFY(std::filesystem::is_directory(dir), "{} is not a directory", dir.string());
  // One manifest per job; several when parts of the dataset were written by separate jobs.
  std::vector<Manifest> manifests;
  try {
    for (const auto& path : list_manifests(dir)) manifests.push_back(read_manifest_file(path));
  } catch (const Error& e) {
    E3_THROW(ErrorKind::Verify, "{}", e.what());
  }
  E3_VERIFY(!manifests.empty(), "{}: no {} (the run did not finish its first commit)", dir.string(), kManifestName);
  const Manifest& first = manifests.front();
  for (const Manifest& m : manifests) {
    const std::string a = manifest_name(first.part), b = manifest_name(m.part);
    E3_VERIFY(m.part.count == first.part.count, "{} and {} cut the dataset into different numbers of parts", a, b);
    const auto diffs = first.fingerprint.differences(m.fingerprint);
    E3_VERIFY(diffs.empty(), "{} and {} come from runs with other settings: {}", a, b, fmt::join(diffs, "; "));
    E3_VERIFY(m.data_fingerprint == first.data_fingerprint && m.num_samples == first.num_samples,
              "{} and {} were made from different input data", a, b);
  }
  Verifier v(dir, first);
  for (const Manifest& m : manifests) v.manifest(m);
  return v.finish();
}

}  // namespace e3::io
