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

}  // namespace

VerifyReport verify_output(const std::filesystem::path& dir) {
  silence_hdf5_errors();
  E3_VERIFY(std::filesystem::is_directory(dir), "{} is not a directory", dir.string());
  std::optional<Manifest> manifest;
  try {
    manifest = read_manifest(dir);
  } catch (const Error& e) {
    E3_THROW(ErrorKind::Verify, "{}", e.what());
  }
  E3_VERIFY(manifest.has_value(), "{}: no {} (the run did not finish its first commit)", dir.string(), kManifestName);
  const Manifest& m = *manifest;
  const RunFingerprint& fp = m.fingerprint;
  const std::optional<kernels::DType> want_dtype = [&]() -> std::optional<kernels::DType> {
    if (fp.dtype == "bf16") return kernels::DType::BF16;
    if (fp.dtype == "fp16") return kernels::DType::F16;
    if (fp.dtype == "fp32") return kernels::DType::F32;
    return std::nullopt;
  }();
  E3_VERIFY(want_dtype.has_value(), "{}: unknown dtype '{}'", kManifestName, fp.dtype);
  const bool want_final = fp.final_mode != "none";
  const hsize_t K = fp.layer_ids.size();

  VerifyReport report;
  report.num_samples = m.num_samples;
  report.complete = m.complete;
  std::map<int64_t, std::string> where_seen;
  std::set<std::string> listed;
  std::vector<float> buf;
  for (const CommittedShard& s : m.shards) {
    const auto path = dir / s.file;
    const std::string where = path.string();
    listed.insert(s.file);
    E3_VERIFY(std::filesystem::exists(path), "{}: listed in the manifest but missing", where);
    const uint64_t size = std::filesystem::file_size(path);
    E3_VERIFY(size == s.bytes, "{}: {} bytes, the manifest says {} (truncated or rewritten)", where, size, s.bytes);
    H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    E3_VERIFY(static_cast<bool>(file), "{}: not a readable HDF5 file: {}", where, hdf5_error_text());
    const hid_t f = file.get();
    E3_VERIFY(read_attr_string(f, "format") == std::string(kFormatName), "{}: attribute format is not '{}'", where,
              kFormatName);
    E3_VERIFY(read_attr_int(f, "format_version") == kFormatVersion, "{}: unexpected format_version", where);
    const auto layer_ids = read_attr_ints(f, "layer_ids");
    E3_VERIFY(layer_ids == fp.layer_ids, "{}: layer_ids [{}] differ from the manifest's [{}]", where,
              fmt::join(layer_ids.value_or(std::vector<int32_t>{}), ","), fmt::join(fp.layer_ids, ","));
    E3_VERIFY(read_attr_string(f, "final") == fp.final_mode, "{}: attribute final differs from the manifest", where);
    E3_VERIFY(read_attr_string(f, "dtype") == fp.dtype, "{}: attribute dtype differs from the manifest", where);
    E3_VERIFY(read_attr_int(f, "shard_index") == s.shard_index, "{}: shard_index differs from the manifest", where);
    const auto hidden = read_attr_int(f, "hidden_size");
    E3_VERIFY(hidden && *hidden > 0, "{}: missing hidden_size", where);
    const auto H = static_cast<hsize_t>(*hidden);

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
      const std::string sw = fmt::format("{} sample {}", where, key);
      E3_VERIFY(std::find(names.begin(), names.end(), key) != names.end(), "{}: missing", sw);
      auto [it, fresh] = where_seen.emplace(idx, where);
      E3_VERIFY(fresh, "sample {:08d} appears twice: in {} and {}", idx, it->second, where);
      H5Id g(E3_H5(H5Gopen2(samples.get(), key.c_str(), H5P_DEFAULT), "{}: opening", sw), H5Gclose);

      H5Id ids = open_dataset(g.get(), "input_ids", sw);
      DatasetShape ids_shape = shape_of(ids.get());
      E3_VERIFY(ids_shape.dims.size() == 1 && ids_shape.dims[0] > 0 && H5Tget_class(ids_shape.type.get()) == H5T_INTEGER,
                "{}: input_ids must be a non-empty 1-D integer dataset", sw);
      const hsize_t T = ids_shape.dims[0];
      E3_VERIFY(read_attr_int(g.get(), "num_tokens") == static_cast<int64_t>(T), "{}: num_tokens attribute is not {}",
                sw, T);
      H5Id mask = open_dataset(g.get(), "loss_mask", sw);
      DatasetShape mask_shape = shape_of(mask.get());
      E3_VERIFY(mask_shape.dims == std::vector<hsize_t>{T} && H5Tget_class(mask_shape.type.get()) == H5T_INTEGER,
                "{}: loss_mask must be [{}] integers", sw, T);

      H5Id hs = open_dataset(g.get(), "hidden_states", sw);
      DatasetShape hs_shape = shape_of(hs.get());
      E3_VERIFY(hs_shape.dims == (std::vector<hsize_t>{T, K, H}), "{}: hidden_states has shape [{}], expected [{}, {}, {}]",
                sw, fmt::join(hs_shape.dims, ", "), T, K, H);
      E3_VERIFY(storage_dtype_of(hs_shape.type.get()) == want_dtype, "{}: hidden_states is not stored as {}", sw,
                fp.dtype);
      check_finite(hs.get(), T * K * H, sw, "hidden_states", buf);

      const bool has_last = H5Lexists(g.get(), "last_hidden_state", H5P_DEFAULT) > 0;
      E3_VERIFY(has_last == want_final, "{}: last_hidden_state is {} but --final is {}", sw,
                has_last ? "present" : "absent", fp.final_mode);
      if (has_last) {
        H5Id last = open_dataset(g.get(), "last_hidden_state", sw);
        DatasetShape last_shape = shape_of(last.get());
        E3_VERIFY(last_shape.dims == (std::vector<hsize_t>{T, H}), "{}: last_hidden_state has shape [{}], expected [{}, {}]",
                  sw, fmt::join(last_shape.dims, ", "), T, H);
        E3_VERIFY(storage_dtype_of(last_shape.type.get()) == want_dtype, "{}: last_hidden_state is not stored as {}", sw,
                  fp.dtype);
        check_finite(last.get(), T * H, sw, "last_hidden_state", buf);
      }
      tokens += static_cast<int64_t>(T);
      ++report.samples;
    }
    E3_VERIFY(tokens == s.num_tokens, "{}: {} tokens, the manifest says {}", where, tokens, s.num_tokens);
    report.tokens += tokens;
    ++report.shards;
  }
  for (const SkippedSample& sk : m.skipped) {
    E3_VERIFY(!where_seen.count(sk.index), "sample {:08d} is listed as skipped but is stored in {}", sk.index,
              where_seen[sk.index]);
    ++report.skipped;
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".h5")
      E3_VERIFY(listed.count(name), "{}: a shard file that the manifest does not list", entry.path().string());
  }
  if (m.complete) {
    E3_VERIFY(report.samples + report.skipped == m.num_samples,
              "the manifest says complete, but {} stored + {} skipped != {} input samples", report.samples,
              report.skipped, m.num_samples);
    std::set<int64_t> skipped;
    for (const SkippedSample& s : m.skipped) skipped.insert(s.index);
    for (int64_t i = 0; i < m.num_samples; ++i)
      E3_VERIFY(where_seen.count(i) || skipped.count(i), "sample {:08d} is neither stored nor listed as skipped", i);
  }
  return report;
}

}  // namespace e3::io
