#include "io/shard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "core/hash.h"

namespace e3::io {

std::string shard_file_name(int64_t shard_index) { return fmt::format("shard-{:06d}.h5", shard_index); }
std::string sample_group_name(int64_t sample_index) { return fmt::format("/samples/{:08d}", sample_index); }

std::optional<int64_t> sample_index_of_group(const std::string& name) {
  if (name.size() < 8 || name.size() > 18) return std::nullopt;  // 18 digits always fit int64
  int64_t index = 0;
  for (const char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    index = index * 10 + (c - '0');
  }
  return index;
}

int64_t require_sample_index(const std::string& name, const std::string& where) {
  const std::optional<int64_t> index = sample_index_of_group(name);
  E3_REQUIRE(index.has_value(), ErrorKind::Output,
             "{}: '{}' is not a sample's group name (8 or more digits, as eagle3_extract writes them): the shard is "
             "damaged or not written by eagle3_extract",
             where, name);
  return *index;
}

std::vector<FinalDataset> final_datasets(const std::string& final_mode) {
  if (final_mode == "post-norm") return {{"last_hidden_state", "post-norm"}};
  if (final_mode == "pre-norm") return {{"last_hidden_state", "pre-norm"}};
  if (final_mode == "both") return {{"last_hidden_state", "post-norm"}, {"last_hidden_state_prenorm", "pre-norm"}};
  E3_REQUIRE(final_mode == "none", ErrorKind::Usage, "final mode must be post-norm, pre-norm, both or none, not '{}'",
             final_mode);
  return {};
}

std::vector<std::string> describe_slots(const std::vector<int32_t>& layer_ids, const std::string& final_mode,
                                        int64_t num_hidden_layers) {
  std::vector<std::string> out;
  for (size_t k = 0; k < layer_ids.size(); ++k) {
    const int32_t id = layer_ids[k];
    out.push_back(fmt::format("hidden_states[:, {}] = output_hidden_states[{}] ({})", k, id,
                              id == 0 ? std::string("the embedding output")
                                      : fmt::format("output of decoder layer {}", id - 1)));
  }
  const int64_t L = num_hidden_layers;
  for (const FinalDataset& f : final_datasets(final_mode)) {
    if (f.norm == "post-norm")
      out.push_back(fmt::format("{} = output_hidden_states[{}] (after the final norm)", f.name, L));
    else
      out.push_back(fmt::format("{} = output of decoder layer {} before the final norm (vLLM id {})", f.name, L - 1, L));
  }
  return out;
}

void fsync_path(const std::filesystem::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  E3_REQUIRE(fd >= 0, ErrorKind::Output, "cannot open {} to sync it: {}", path.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories; the data is still written.
  E3_REQUIRE(rc == 0 || (directory && (err == EINVAL || err == EBADF)), ErrorKind::Output, "fsync {}: {}",
             path.string(), std::strerror(err));
}

std::string file_checksum(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  E3_REQUIRE(fd >= 0, ErrorKind::Output, "cannot open {} to checksum it: {}", path.string(), std::strerror(errno));
  ContentHash hash;
  std::vector<unsigned char> buf(8 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      E3_THROW(ErrorKind::Output, "reading {}: {}", path.string(), std::strerror(err));
    }
    hash.update(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return hash.hex();
}

ShardWriter::ShardWriter(const std::filesystem::path& out_dir, int64_t shard_index, const ShardAttributes& attrs,
                         WriteAccount* account, int threads)
    : out_dir_(out_dir),
      shard_index_(shard_index),
      attrs_(attrs),
      codec_(storage_codec(attrs.dtype)),
      account_(account),
      rows_(threads),
      finals_(final_datasets(attrs.final_mode)) {
  final_path_ = out_dir / shard_file_name(shard_index);
  // The temporary name does not end in .h5, so globs for shards never see a partial one.
  temp_path_ = out_dir / fmt::format("{}.tmp.{}", shard_file_name(shard_index), ::getpid());
  std::error_code ec;
  std::filesystem::remove(temp_path_, ec);
  const H5Id fapl = file_create_access_list();  // kept open: closing it would clear the error stack
  file_ = H5Id(E3_H5(H5Fcreate(temp_path_.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()), "creating {}",
                     temp_path_.string()),
               H5Fclose);
  const hid_t f = file_.get();
  write_attr(f, "format", std::string(kFormatName));
  write_attr(f, "format_version", kFormatVersion);
  write_attr(f, "layer_ids", attrs_.layer_ids);
  write_attr(f, "final", attrs_.final_mode);
  // Each slot said twice over: as numbers for programs, in words for people (h5dump, verify).
  write_attr(f, "hidden_states_hf_index", attrs_.layer_ids);
  if (!finals_.empty()) write_attr(f, "last_hidden_state_norm", finals_.front().norm);
  write_attr(f, "slots", describe_slots(attrs_.layer_ids, attrs_.final_mode, attrs_.num_hidden_layers));
  write_attr(f, "model_type", attrs_.model_type);
  write_attr(f, "hidden_size", attrs_.hidden_size);
  write_attr(f, "num_hidden_layers", attrs_.num_hidden_layers);
  write_attr(f, "dtype", std::string(dtype_name(attrs_.dtype)));
  write_attr(f, "tp", attrs_.tp);
  write_attr(f, "model", attrs_.model_path);
  write_attr(f, "config_fingerprint", attrs_.config_fingerprint);
  write_attr(f, "run_fingerprint", attrs_.run_fingerprint);
  write_attr(f, "tool_version", attrs_.tool_version);
  write_attr(f, "shard_index", shard_index_);
  samples_group_ = H5Id(E3_H5(H5Gcreate2(f, "samples", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "creating /samples"),
                        H5Gclose);
  for (const StoredPart& part : codec_.parts()) part_types_.push_back(file_type_for(part.element));
  // The states' datasets: contiguous, allocated at creation and never filled (every byte is written).
  state_dcpl_ = H5Id(E3_H5(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"), H5Pclose);
  E3_H5(H5Pset_alloc_time(state_dcpl_.get(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time");
  E3_H5(H5Pset_fill_time(state_dcpl_.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  data_fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CLOEXEC);
  E3_REQUIRE(data_fd_ >= 0, ErrorKind::Output, "cannot open {}: {}", temp_path_.string(), std::strerror(errno));
  record_.file = final_path_.filename().string();
  record_.shard_index = shard_index_;
}

ShardWriter::~ShardWriter() {
  if (data_fd_ >= 0) ::close(data_fd_);
  if (committed_) return;
  skipped_group_ = H5Id();
  samples_group_ = H5Id();
  file_ = H5Id();
  std::error_code ec;
  std::filesystem::remove(temp_path_, ec);
}

namespace {

H5Id write_dataset(hid_t group, const char* name, hid_t file_type, hid_t mem_type, const std::vector<hsize_t>& dims,
                   const void* data) {
  H5Id space(E3_H5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple"),
             H5Sclose);
  H5Id ds(E3_H5(H5Dcreate2(group, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                "creating dataset {}", name),
          H5Dclose);
  E3_H5(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "writing dataset {}", name);
  return ds;
}

}  // namespace

namespace {

// HDF5 metadata of one sample (groups, dataset headers, attributes) measured about 3 KiB.
constexpr uint64_t kSampleMetadataBytes = 16 << 10;
// Beyond the estimates: room for metadata that HDF5 allocates and flushes at close.
constexpr uint64_t kCloseSlackBytes = 1 << 20;
// Below this much free space (plus 16 samples' worth), blocks are reserved before writing.
constexpr uint64_t kReserveBelowBytes = uint64_t{4} << 30;

}  // namespace

void ShardWriter::reserve(uint64_t bytes) {
  // With room to spare, one statvfs per sample is all (reserved blocks cost some file systems
  // an extent conversion per write). Once the file system is nearly full, this shard reserves
  // ahead of every sample.
  if (!reserving_) {
    struct statvfs st {};
    if (::fstatvfs(data_fd_, &st) == 0 &&
        static_cast<uint64_t>(st.f_bavail) * st.f_frsize >= kReserveBelowBytes + 16 * bytes)
      return;
    reserving_ = true;
  }
  hsize_t size = 0;  // HDF5's end of allocated space so far
  if (H5Fget_filesize(file_.get(), &size) < 0) size = 0;
  const uint64_t need_end = static_cast<uint64_t>(size) + bytes + kCloseSlackBytes;
  if (need_end <= reserved_end_) return;
  const uint64_t end = need_end + bytes;  // a step ahead, so most samples need no call
  if (can_reserve_) {
    const int rc = ::fallocate(data_fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(reserved_end_),
                               static_cast<off_t>(end - reserved_end_));
    if (rc == 0) {
      reserved_end_ = end;
      return;
    }
    if (errno != EOPNOTSUPP && errno != ENOSYS) {
      E3_THROW(ErrorKind::Output,
               "{}: cannot reserve {:.1f} MiB for the next sample: {} {}", temp_path_.string(),
               (end - reserved_end_) / 1048576.0, std::strerror(errno), kDiskFullHint);
    }
    can_reserve_ = false;
  }
  // No fallocate here: check the free space instead (racy against other writers, but close).
  struct statvfs st {};
  if (::fstatvfs(data_fd_, &st) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
    E3_REQUIRE(free_bytes >= bytes + kCloseSlackBytes, ErrorKind::Output,
               "{}: {:.1f} MiB free, the next sample needs {:.1f} MiB {}", temp_path_.string(), free_bytes / 1048576.0,
               (bytes + kCloseSlackBytes) / 1048576.0, kDiskFullHint);
  }
}

void ShardWriter::release_reservation() {
  if (data_fd_ < 0) return;
  struct stat st {};
  if (reserved_end_ > 0 && ::fstat(data_fd_, &st) == 0 && reserved_end_ > static_cast<uint64_t>(st.st_size))
    ::fallocate(data_fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, st.st_size,
                static_cast<off_t>(reserved_end_ - static_cast<uint64_t>(st.st_size)));  // best effort
  ::close(data_fd_);
  data_fd_ = -1;
}

void ShardWriter::write_sample(int64_t index, const std::string* id, const std::vector<int32_t>& input_ids,
                               const std::vector<uint8_t>& loss_mask, const std::vector<const void*>& layers,
                               const std::vector<const void*>& finals) {
  const auto T = static_cast<hsize_t>(input_ids.size());
  const auto K = static_cast<hsize_t>(layers.size());
  E3_REQUIRE(loss_mask.size() == input_ids.size() && K == attrs_.layer_ids.size() && finals.size() == finals_.size(),
             ErrorKind::Internal, "sample {}: {} ids, {} mask, {} layers, {} final states (expected {})", index,
             input_ids.size(), loss_mask.size(), K, finals.size(), finals_.size());
  const size_t row = codec_.row_bytes(attrs_.hidden_size);
  StageTimer metadata(account_, WriteStage::Metadata);
  reserve(T * (K + finals.size()) * row + T * 5 + kSampleMetadataBytes);
  H5Id group(E3_H5(H5Gcreate2(file_.get(), sample_group_name(index).c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                   "creating group {} in {}", sample_group_name(index), temp_path_.string()),
             H5Gclose);
  if (id) write_attr(group.get(), "id", *id);
  write_attr(group.get(), "num_tokens", static_cast<int64_t>(T));
  write_dataset(group.get(), "input_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, {T}, input_ids.data());
  write_dataset(group.get(), "loss_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, {T}, loss_mask.data());
  metadata.stop();

  write_state(group.get(), "hidden_states", {T, K}, layers);
  for (size_t j = 0; j < finals.size(); ++j) write_state(group.get(), finals_[j].name, {T}, {finals[j]});
  token_counts_.add(input_ids, loss_mask);
  record_.samples.push_back(index);
  record_.num_tokens += static_cast<int64_t>(T);
}

void ShardWriter::write_state(hid_t group, const std::string& name, const std::vector<uint64_t>& rows,
                              const std::vector<const void*>& blocks) {
  const hsize_t T = rows.front();
  const int64_t H = attrs_.hidden_size;
  RowSource src;
  src.blocks = blocks;
  src.row_stride = codec_.row_bytes(H);
  src.tokens = T;
  for (size_t p = 0; p < codec_.parts().size(); ++p) {
    const StoredPart& part = codec_.parts()[p];
    src.part_bytes = part.row_bytes(H);
    const std::vector<uint64_t> part_dims = part.dims(rows, H);
    const std::vector<hsize_t> dims(part_dims.begin(), part_dims.end());
    const hid_t type = part_types_[p].get();
    const std::string dataset_name = name + part.suffix;
    StageTimer metadata(account_, WriteStage::Metadata);
    const H5Id space(E3_H5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple"),
                     H5Sclose);
    // Its storage is allocated now, so that the rows can go to its offset from the writer's threads.
    const H5Id ds(E3_H5(H5Dcreate2(group, dataset_name.c_str(), type, space.get(), H5P_DEFAULT, state_dcpl_.get(),
                                   H5P_DEFAULT),
                        "creating dataset {}", dataset_name),
                  H5Dclose);
    metadata.stop();
    if (src.bytes() > 0) {
      const haddr_t at = H5Dget_offset(ds.get());
      E3_REQUIRE(at != HADDR_UNDEF, ErrorKind::Internal, "{}: dataset {} has no storage after its creation",
                 temp_path_.string(), dataset_name);
      const StageTimer timer(account_, WriteStage::DataWrite);
      rows_.write(data_fd_, static_cast<uint64_t>(at), src, fmt::format("{} of {}", dataset_name, temp_path_.string()));
      if (account_) account_->add_bytes(src.bytes());
    }
    const StageTimer attribute(account_, WriteStage::Metadata);
    if (part.encoding) write_attr(ds.get(), "encoding", std::string(part.encoding));
    src.part_offset += src.part_bytes;
  }
}

void ShardWriter::skip_sample(const SkippedSample& skipped) {
  reserve(kSampleMetadataBytes);
  if (!skipped_group_)
    skipped_group_ = H5Id(E3_H5(H5Gcreate2(file_.get(), "skipped", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                "creating /skipped in {}", temp_path_.string()),
                          H5Gclose);
  const std::string name = fmt::format("{:08d}", skipped.index);
  H5Id group(E3_H5(H5Gcreate2(skipped_group_.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                   "creating /skipped/{} in {}", name, temp_path_.string()),
             H5Gclose);
  write_attr(group.get(), "reason", skipped.reason);
  write_attr(group.get(), "line", skipped.line);
  record_.skipped.push_back(skipped);
}

CommittedShard ShardWriter::commit() {
  close();
  return publish();
}

void ShardWriter::close() {
  const StageTimer timer(account_, WriteStage::Close);
  const std::vector<TokenCount> counts = token_counts_.counts();
  reserve(counts.size() * sizeof(TokenCount) + kSampleMetadataBytes);
  write_token_counts(file_.get(), counts, attrs_.vocab_size, temp_path_.string());
  E3_H5(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), "flushing {}", temp_path_.string());
  for (H5Id& type : part_types_) type.close();
  state_dcpl_.close();
  skipped_group_.close();
  samples_group_.close();
  file_.close();
  release_reservation();
}

CommittedShard ShardWriter::publish() {
  // Start the disk writing, then hash the file from the page cache while the disk works, then
  // wait for the disk: hashing after the fsync would add its time to every shard's commit.
  // Starting the writeback blocks too where the disk is the slower side: it counts as syncing.
  {
    const StageTimer timer(account_, WriteStage::Sync);
    const int fd = ::open(temp_path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);  // best effort: fsync below is the guarantee
      ::close(fd);
    }
  }
  {
    const StageTimer timer(account_, WriteStage::Checksum);
    record_.checksum = file_checksum(temp_path_);
  }
  const StageTimer timer(account_, WriteStage::Sync);
  fsync_path(temp_path_, false);
  std::error_code ec;
  std::filesystem::rename(temp_path_, final_path_, ec);
  E3_REQUIRE(!ec, ErrorKind::Output, "renaming {} to {}: {}", temp_path_.string(), final_path_.string(),
             ec.message());
  committed_ = true;
  fsync_path(out_dir_, true);
  record_.bytes = std::filesystem::file_size(final_path_);
  return record_;
}

}  // namespace e3::io
