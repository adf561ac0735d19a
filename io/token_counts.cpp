#include "io/token_counts.h"

#include <fmt/format.h>

#include "io/hdf5.h"

namespace e3::io {

void TokenCounter::bump(int64_t id, int64_t n) {
  E3_REQUIRE(id >= 0, ErrorKind::Internal, "token id {} counted", id);
  const auto i = static_cast<size_t>(id);
  if (i >= by_id_.size()) by_id_.resize(i + 1, 0);
  by_id_[i] += n;
  total_ += n;
}

void TokenCounter::add(const int32_t* ids, const uint8_t* mask, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (mask[i] != 0) bump(ids[i], 1);
}

void TokenCounter::add(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask) {
  E3_REQUIRE(ids.size() == mask.size(), ErrorKind::Internal, "{} ids, {} mask values", ids.size(), mask.size());
  add(ids.data(), mask.data(), ids.size());
}

void TokenCounter::add(const std::vector<TokenCount>& counts) {
  for (const TokenCount& c : counts) bump(c.id, c.count);
}

std::vector<TokenCount> TokenCounter::counts() const {
  std::vector<TokenCount> out;
  for (size_t i = 0; i < by_id_.size(); ++i)
    if (by_id_[i] != 0) out.push_back({static_cast<int64_t>(i), by_id_[i]});
  return out;
}

void write_token_counts(hid_t file, const std::vector<TokenCount>& counts, int64_t vocab_size,
                        const std::string& where) {
  std::vector<int64_t> rows;
  rows.reserve(counts.size() * 2);
  for (const TokenCount& c : counts) {
    rows.push_back(c.id);
    rows.push_back(c.count);
  }
  const hsize_t dims[2] = {counts.size(), 2};
  H5Id space(E3_H5(H5Screate_simple(2, dims, nullptr), "{}: H5Screate_simple", where), H5Sclose);
  H5Id ds(E3_H5(H5Dcreate2(file, kTokenCountsDataset, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT,
                           H5P_DEFAULT),
                "{}: creating /{}", where, kTokenCountsDataset),
          H5Dclose);
  // A shard whose samples have no masked token holds an empty table: nothing to write.
  if (!rows.empty())
    E3_H5(H5Dwrite(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), "{}: writing /{}", where,
          kTokenCountsDataset);
  if (vocab_size > 0) write_attr(ds.get(), "vocab_size", vocab_size);
}

std::optional<StoredTokenCounts> read_token_counts(hid_t file, const std::string& where, ErrorKind kind) {
  if (H5Lexists(file, kTokenCountsDataset, H5P_DEFAULT) <= 0) return std::nullopt;
  const std::string dw = fmt::format("{}: /{}", where, kTokenCountsDataset);
  H5Id ds(E3_H5(H5Dopen2(file, kTokenCountsDataset, H5P_DEFAULT), "{}: opening", dw), H5Dclose);
  H5Id type(E3_H5(H5Dget_type(ds.get()), "{}: H5Dget_type", dw), H5Tclose);
  H5Id space(E3_H5(H5Dget_space(ds.get()), "{}: H5Dget_space", dw), H5Sclose);
  hsize_t dims[2] = {0, 0};
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank == 2) H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  E3_REQUIRE(rank == 2 && dims[1] == 2 && H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 8 &&
                 H5Tget_sign(type.get()) == H5T_SGN_2,
             kind, "{} must be int64 [n, 2] rows of (token id, count)", dw);
  StoredTokenCounts out;
  out.vocab_size = read_attr_int(ds.get(), "vocab_size").value_or(0);
  std::vector<int64_t> rows(dims[0] * 2);
  if (!rows.empty())
    E3_H5(H5Dread(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), "{}: reading", dw);
  out.counts.reserve(dims[0]);
  for (size_t r = 0; r < dims[0]; ++r) {
    const TokenCount c{rows[2 * r], rows[2 * r + 1]};
    E3_REQUIRE(c.id >= 0 && (out.vocab_size == 0 || c.id < out.vocab_size), kind,
               "{}: row {} counts token id {}, outside the vocabulary of {} tokens", dw, r, c.id, out.vocab_size);
    E3_REQUIRE(out.counts.empty() || c.id > out.counts.back().id, kind,
               "{}: row {} (token id {}) does not come after token id {}: the ids must rise", dw, r, c.id,
               out.counts.back().id);
    E3_REQUIRE(c.count > 0, kind, "{}: row {} gives token id {} the count {}; counts are positive", dw, r, c.id,
               c.count);
    out.counts.push_back(c);
  }
  return out;
}

}  // namespace e3::io
