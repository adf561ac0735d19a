#include <fmt/format.h>

#include "io/shard_writer.h"

namespace e3::io {

InspectedShard inspect_shard(const std::filesystem::path& path) {
  const std::string where = path.string();
  // Named like a shard does not make it one: H5Fopen of a FIFO would wait forever.
  require_regular_file(path, ErrorKind::Output);
  const H5Id fapl = file_access_list();  // kept open: closing it would clear the error stack
  H5Id file(E3_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), "opening {}", where), H5Fclose);
  InspectedShard out;
  E3_REQUIRE(read_attr_string(file.get(), "format") == std::string(kFormatName), ErrorKind::Output,
             "{}: not an eagle3_extract shard", where);
  const auto index = read_attr_int(file.get(), "shard_index");
  const auto fp = read_attr_string(file.get(), "run_fingerprint");
  E3_REQUIRE(index && fp, ErrorKind::Output, "{}: missing shard_index or run_fingerprint", where);
  out.record.file = path.filename().string();
  out.record.shard_index = *index;
  out.run_fingerprint = *fp;
  H5Id samples(E3_H5(H5Gopen2(file.get(), "samples", H5P_DEFAULT), "{}: opening /samples", where), H5Gclose);
  std::vector<std::string> names = list_links(samples.get(), where);
  for (const std::string& n : names) {
    H5Id g(E3_H5(H5Gopen2(samples.get(), n.c_str(), H5P_DEFAULT), "{}: opening sample {}", where, n), H5Gclose);
    const auto tokens = read_attr_int(g.get(), "num_tokens");
    E3_REQUIRE(tokens.has_value(), ErrorKind::Output, "{}: sample {} has no num_tokens", where, n);
    out.record.samples.push_back(require_sample_index(n, where));
    out.record.num_tokens += *tokens;
  }
  if (H5Lexists(file.get(), "skipped", H5P_DEFAULT) > 0) {
    H5Id skipped(E3_H5(H5Gopen2(file.get(), "skipped", H5P_DEFAULT), "{}: opening /skipped", where), H5Gclose);
    for (const std::string& n : list_links(skipped.get(), where)) {
      H5Id g(E3_H5(H5Gopen2(skipped.get(), n.c_str(), H5P_DEFAULT), "{}: opening /skipped/{}", where, n), H5Gclose);
      out.record.skipped.push_back(
          {require_sample_index(n, where), read_attr_int(g.get(), "line").value_or(0), read_attr_string(g.get(), "reason").value_or("")});
    }
  }
  file.close();
  out.record.bytes = std::filesystem::file_size(path);
  out.record.checksum = file_checksum(path);
  return out;
}

}  // namespace e3::io
