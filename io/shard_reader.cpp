#include "io/shard_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "io/file_io.h"
#include "io/hdf5.h"
#include "io/shard_writer.h"

namespace e3::io {

const StoredDataset* StoredSample::find(const std::string& name) const {
  for (const StoredDataset& d : datasets)
    if (d.name == name) return &d;
  return nullptr;
}

namespace {

DType element_of(hid_t ds, const std::string& where) {
  H5Id type(E3_H5(H5Dget_type(ds), "{}: H5Dget_type", where), H5Tclose);
  const hid_t t = type.get();
  if (H5Tget_class(t) == H5T_INTEGER) {
    const size_t size = H5Tget_size(t);
    if (size == 4 && H5Tget_sign(t) == H5T_SGN_2) return DType::I32;
    if (size == 1 && H5Tget_sign(t) == H5T_SGN_NONE)
      return read_attr_string(ds, "encoding") == std::string(kE4m3fnEncoding) ? DType::F8E4M3 : DType::U8;
  } else if (const auto dtype = storage_dtype_of(t)) {
    return *dtype;  // F32, BF16 or F16
  }
  E3_THROW(ErrorKind::Output, "{}: stored in a type eagle3_extract does not write", where);
}

StoredDataset locate(hid_t group, const std::string& name, const std::string& where) {
  const std::string dw = fmt::format("{} {}", where, name);
  H5Id ds(E3_H5(H5Dopen2(group, name.c_str(), H5P_DEFAULT), "{}: opening", dw), H5Dclose);
  StoredDataset d;
  d.name = name;
  d.element = element_of(ds.get(), dw);
  H5Id space(E3_H5(H5Dget_space(ds.get()), "{}: H5Dget_space", dw), H5Sclose);
  const int rank = E3_H5(H5Sget_simple_extent_ndims(space.get()), "{}: H5Sget_simple_extent_ndims", dw);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  E3_H5(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "{}: H5Sget_simple_extent_dims", dw);
  d.dims.assign(dims.begin(), dims.end());
  uint64_t count = 1;
  for (uint64_t n : d.dims) count *= n;
  d.bytes = count * dtype_size(d.element);
  const auto offset = contiguous_offset(ds.get());
  E3_REQUIRE(offset.has_value() || d.bytes == 0, ErrorKind::Output,
             "{}: not stored in one uncompressed piece (as eagle3_extract writes it; was the file repacked?)", dw);
  d.offset = offset.value_or(0);
  return d;
}

}  // namespace

ShardLayout read_shard_layout(const std::filesystem::path& path) {
  const std::string where = path.string();
  require_regular_file(path, ErrorKind::Output);
  const H5Id fapl = file_access_list();  // kept open: closing it would clear the error stack
  H5Id file(E3_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), "opening {}", where), H5Fclose);
  const hid_t f = file.get();
  E3_REQUIRE(read_attr_string(f, "format") == std::string(kFormatName), ErrorKind::Output,
             "{}: not an eagle3_extract shard", where);
  ShardLayout out;
  ShardDescription& d = out.description;
  d.layer_ids = read_attr_ints(f, "hidden_states_hf_index").value_or(read_attr_ints(f, "layer_ids").value_or(std::vector<int32_t>{}));
  d.final_mode = read_attr_string(f, "final").value_or("");
  d.dtype = read_attr_string(f, "dtype").value_or("");
  d.model_type = read_attr_string(f, "model_type").value_or("");
  d.model_path = read_attr_string(f, "model").value_or("");
  d.run_fingerprint = read_attr_string(f, "run_fingerprint").value_or("");
  d.hidden_size = read_attr_int(f, "hidden_size").value_or(0);
  d.num_hidden_layers = read_attr_int(f, "num_hidden_layers").value_or(0);
  H5Id samples(E3_H5(H5Gopen2(f, "samples", H5P_DEFAULT), "{}: opening /samples", where), H5Gclose);
  for (const std::string& key : list_links(samples.get(), where)) {
    const std::string sw = fmt::format("{} sample {}", where, key);
    H5Id g(E3_H5(H5Gopen2(samples.get(), key.c_str(), H5P_DEFAULT), "{}: opening", sw), H5Gclose);
    StoredSample s;
    s.index = require_sample_index(key, where);
    s.id = read_attr_string(g.get(), "id");
    s.tokens = read_attr_int(g.get(), "num_tokens").value_or(0);
    for (const std::string& name : list_links(g.get(), sw)) s.datasets.push_back(locate(g.get(), name, sw));
    out.samples.push_back(std::move(s));
  }
  out.token_counts = read_token_counts(f, where, ErrorKind::Output);
  std::sort(out.samples.begin(), out.samples.end(),
            [](const StoredSample& a, const StoredSample& b) { return a.index < b.index; });
  return out;
}

void read_stored_bytes(int fd, const StoredDataset& d, void* out, const std::string& where) {
  pread_exact(fd, out, d.bytes, d.offset, ErrorKind::Output, fmt::format("{} {}", where, d.name));
}

}  // namespace e3::io
