#include "io/tensor_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string_view>
#include <utility>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace e3::io {

namespace {

// Pieces below this size are gathered; above it the copy into the buffer would cost more
// than the system call it saves.
constexpr size_t kGatherBelow = 64 * 1024;
// One write() call moves at most this much: Linux caps a call near 2 GiB anyway, and a
// bounded call keeps a signal's EINTR retry cheap.
constexpr size_t kMaxWriteCall = size_t{1} << 30;

}  // namespace

size_t element_size(TensorElement element) {
  switch (element) {
    case TensorElement::BF16:
    case TensorElement::F16:
      return 2;
    case TensorElement::F32:
    case TensorElement::I32:
      return 4;
    case TensorElement::I64:
      return 8;
    case TensorElement::U8:
    case TensorElement::Bool:
      return 1;
  }
  E3_THROW(ErrorKind::Internal, "unknown tensor element {}", static_cast<int>(element));
}

const char* safetensors_dtype(TensorElement element) {
  switch (element) {
    case TensorElement::BF16: return "BF16";
    case TensorElement::F16: return "F16";
    case TensorElement::F32: return "F32";
    case TensorElement::I64: return "I64";
    case TensorElement::I32: return "I32";
    case TensorElement::U8: return "U8";
    case TensorElement::Bool: return "BOOL";
  }
  E3_THROW(ErrorKind::Internal, "unknown tensor element {}", static_cast<int>(element));
}

uint64_t tensor_bytes(const TensorRef& tensor, const std::filesystem::path& where) {
  uint64_t bytes = element_size(tensor.element);
  for (const int64_t dim : tensor.shape) {
    E3_REQUIRE(dim >= 0, ErrorKind::Internal, "{}: tensor '{}' has a negative dimension {}", where.string(),
               tensor.name, dim);
    E3_REQUIRE(dim == 0 || bytes <= (uint64_t{1} << 62) / static_cast<uint64_t>(dim), ErrorKind::Internal,
               "{}: tensor '{}' is too large", where.string(), tensor.name);
    bytes *= static_cast<uint64_t>(dim);
  }
  E3_REQUIRE(bytes == 0 || tensor.data != nullptr || tensor.fill, ErrorKind::Internal, "{}: tensor '{}' has no data",
             where.string(), tensor.name);
  return bytes;
}

std::filesystem::path temporary_path(const std::filesystem::path& final_path) {
  return final_path.parent_path() / fmt::format(".{}.partial", final_path.filename().string());
}

bool is_temporary_name(const std::string& name) {
  constexpr std::string_view suffix = ".partial";
  if (name.size() > suffix.size() + 1 && name.front() == '.' && name.ends_with(suffix)) return true;
  const size_t at = name.rfind(".tmp.");
  return at != std::string::npos && at > 0 && at + 5 < name.size() &&
         std::all_of(name.begin() + static_cast<std::ptrdiff_t>(at + 5), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

DirectBuffer::DirectBuffer(size_t bytes) : size_((bytes + kAlign - 1) / kAlign * kAlign) {
  E3_REQUIRE(size_ > 0, ErrorKind::Internal, "a write buffer of 0 bytes");
  if (size_ >= PageMemory::kPage) {
    pages_ = PageMemory(size_);
    data_ = pages_.data();
    return;
  }
  void* p = nullptr;
  E3_REQUIRE(::posix_memalign(&p, kAlign, size_) == 0, ErrorKind::Output,
             "cannot allocate {} bytes of aligned write buffer", size_);
  data_ = static_cast<unsigned char*>(p);
}

DirectBuffer::~DirectBuffer() {
  if (!pages_.data()) std::free(data_);
}

TempFile::TempFile(const std::filesystem::path& final_path, DirectBuffer* direct)
    : final_path_(final_path), temp_path_(temporary_path(final_path)) {
  if (direct) {
    // O_RDWR: a patch of bytes already written reads their block back (write_at).
    fd_ = ::open(temp_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd_ >= 0) {
      direct_ = direct;
      return;
    }
    if (errno != EINVAL) fail("cannot create", errno);  // EINVAL: no O_DIRECT here; the page cache then
  }
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create", errno);
  pending_.reserve(2 * kGatherBelow);
}

TempFile::TempFile(TempFile&& other) noexcept
    : final_path_(std::move(other.final_path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      pending_(std::move(other.pending_)),
      fill_piece_(std::move(other.fill_piece_)),
      committed_(std::exchange(other.committed_, true)),
      direct_(std::exchange(other.direct_, nullptr)),
      staged_(std::exchange(other.staged_, 0)) {}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void TempFile::fail(const char* what, int err) {
  E3_THROW(ErrorKind::Output, "{} {} (writing {}): {}", what, temp_path_.string(), final_path_.string(),
           std::strerror(err));
}

void TempFile::write_fd(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t done = ::write(fd_, p, std::min(n, kMaxWriteCall));
    if (done < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    if (done == 0) fail("cannot write", EIO);
    p += done;
    n -= static_cast<size_t>(done);
  }
}

void TempFile::pwrite_fd(const void* data, size_t n, uint64_t offset) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t done = ::pwrite(fd_, p, std::min(n, kMaxWriteCall), static_cast<off_t>(offset));
    if (done < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    if (done == 0) fail("cannot write", EIO);
    p += done;
    offset += static_cast<uint64_t>(done);
    n -= static_cast<size_t>(done);
  }
}

void TempFile::flush_direct(bool last) {
  if (staged_ == 0) return;
  size_t n = staged_;
  if (last) {  // the file's end: whole blocks out, cut back to size_ by commit()
    n = (staged_ + DirectBuffer::kAlign - 1) / DirectBuffer::kAlign * DirectBuffer::kAlign;
    std::memset(direct_->data() + staged_, 0, n - staged_);
  }
  pwrite_fd(direct_->data(), n, size_ - staged_);
  staged_ = 0;
}

void TempFile::write_at_direct(uint64_t offset, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  const uint64_t staged_start = size_ - staged_;
  std::unique_ptr<DirectBuffer> block;
  // Bytes already written: their blocks read back, patched and written again (one block for
  // a zip header's CRC after its record: rare and small).
  while (n > 0 && offset < staged_start) {
    constexpr size_t B = DirectBuffer::kAlign;
    if (!block) block = std::make_unique<DirectBuffer>(B);  // O_DIRECT needs aligned memory
    const uint64_t block_start = offset / B * B;
    const size_t in_block = static_cast<size_t>(offset - block_start);
    const size_t take = static_cast<size_t>(std::min<uint64_t>({n, B - in_block, staged_start - offset}));
    ssize_t got;
    do got = ::pread(fd_, block->data(), B, static_cast<off_t>(block_start));
    while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(B)) fail("cannot read back", got < 0 ? errno : EIO);
    std::memcpy(block->data() + in_block, p, take);
    pwrite_fd(block->data(), B, block_start);
    p += take;
    offset += take;
    n -= take;
  }
  if (n > 0) std::memcpy(direct_->data() + (offset - staged_start), p, n);
}

void TempFile::flush() {
  if (direct_) return flush_direct(false);
  if (pending_.empty()) return;
  write_fd(pending_.data(), pending_.size());
  pending_.clear();
}

void TempFile::write(const void* data, size_t n) {
  if (direct_) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (n > 0) {
      const size_t take = std::min(n, direct_->size() - staged_);
      std::memcpy(direct_->data() + staged_, p, take);
      staged_ += take;
      size_ += take;
      p += take;
      n -= take;
      if (staged_ == direct_->size()) flush_direct(false);
    }
    return;
  }
  if (n < kGatherBelow) {
    const auto* p = static_cast<const unsigned char*>(data);
    pending_.insert(pending_.end(), p, p + n);
    if (pending_.size() >= kGatherBelow) flush();
  } else {
    flush();
    write_fd(data, n);
  }
  size_ += n;
}

void TempFile::write_filled(uint64_t n, const std::function<void(unsigned char* dst, size_t k)>& produce) {
  if (direct_) {
    while (n > 0) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>({n, direct_->size() - staged_, kFillPiece}));
      produce(direct_->data() + staged_, take);
      staged_ += take;
      size_ += take;
      n -= take;
      if (staged_ == direct_->size()) flush_direct(false);
    }
    return;
  }
  flush();
  if (n > 0 && !fill_piece_) fill_piece_.reset(new unsigned char[kFillPiece]);
  while (n > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, kFillPiece));
    produce(fill_piece_.get(), take);
    write_fd(fill_piece_.get(), take);
    size_ += take;
    n -= take;
  }
}

void TempFile::write_tensor(const TensorRef& tensor, uint64_t bytes) {
  if (bytes == 0) return;
  if (!tensor.fill) return write(tensor.data, static_cast<size_t>(bytes));
  uint64_t done = 0;
  write_filled(bytes, [&](unsigned char* dst, size_t k) {
    tensor.fill(done, dst, k);
    done += k;
  });
}

void TempFile::write_at(uint64_t offset, const void* data, size_t n) {
  E3_REQUIRE(offset + n <= size_, ErrorKind::Internal, "{}: patch past the end", temp_path_.string());
  if (direct_) return write_at_direct(offset, data, n);
  const uint64_t pending_start = size_ - pending_.size();
  if (offset >= pending_start) {
    std::memcpy(pending_.data() + (offset - pending_start), data, n);
    return;
  }
  flush();
  pwrite_fd(data, n, offset);
}

void TempFile::close() {
  if (fd_ < 0) return;
  if (direct_) {
    flush_direct(true);
    if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) fail("cannot truncate", errno);
  } else {
    flush();
  }
  // close() reports errors that a network file system defers until then.
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail("cannot close", errno);
}

void TempFile::commit() {
  close();
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) fail("cannot rename", errno);
  committed_ = true;
}

}  // namespace e3::io
