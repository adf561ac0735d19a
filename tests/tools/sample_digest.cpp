// sample_digest OUT_DIR: one line per sample and dataset of an output directory, "INDEX NAME
// CHECKSUM", sorted, over the stored bits (read with the file's own type, so nothing is
// converted). Two runs hold the same bytes for every sample exactly when their listings are
// equal, whatever the shards' own bytes (HDF5 object headers, layout) are.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "io/hdf5.h"
#include "core/hash.h"

namespace {

using e3::io::H5Id;

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "FAIL %s\n", msg.c_str());
  std::exit(1);
}

std::string raw_checksum(hid_t group, const std::string& name, const std::string& where) {
  H5Id ds(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds) fail("cannot open " + where);
  H5Id type(H5Dget_type(ds.get()), H5Tclose);
  H5Id space(H5Dget_space(ds.get()), H5Sclose);
  const auto n = static_cast<size_t>(H5Sget_simple_extent_npoints(space.get()));
  std::vector<unsigned char> bytes(n * H5Tget_size(type.get()));
  if (n && H5Dread(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0) fail("reading " + where);
  e3::ContentHash h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) fail("usage: sample_digest OUT_DIR");
  e3::io::silence_hdf5_errors();
  std::map<std::string, std::string> lines;  // "index name" -> checksum, sorted
  for (const auto& e : std::filesystem::directory_iterator(argv[1])) {
    if (e.path().extension() != ".h5" || !e.is_regular_file()) continue;
    const std::string file = e.path().string();
    H5Id f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!f) fail("cannot open " + file);
    H5Id samples(H5Gopen2(f.get(), "samples", H5P_DEFAULT), H5Gclose);
    if (!samples) fail(file + ": no /samples");
    for (const std::string& index : e3::io::list_links(samples.get(), file)) {
      H5Id g(H5Gopen2(samples.get(), index.c_str(), H5P_DEFAULT), H5Gclose);
      for (const std::string& name : e3::io::list_links(g.get(), file + ":/samples/" + index)) {
        const std::string key = index + " " + name;
        if (lines.count(key)) fail("sample " + index + " twice");
        lines[key] = raw_checksum(g.get(), name, file + ":/samples/" + index + "/" + name);
      }
    }
  }
  for (const auto& [key, sum] : lines) std::printf("%s %s\n", key.c_str(), sum.c_str());
  return 0;
}
