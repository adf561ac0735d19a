#include "io/shard_stats.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/e4m3.h"
#include "core/error.h"
#include "core/storage_codec.h"
#include "io/file_io.h"
#include "io/hdf5.h"
#include "io/manifest.h"
#include "io/shard_reader.h"
#include "io/verify.h"

namespace e3::io {
namespace {

#define E3_STATS_CHECK(cond, ...) E3_REQUIRE(cond, ::e3::ErrorKind::Verify, __VA_ARGS__)

// sum += x with the rounding error kept in carry (Neumaier): the total of a billion rows keeps
// its digits.
void compensated_add(double& sum, double& carry, double x) {
  const double t = sum + x;
  carry += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
  sum = t;
}

}  // namespace

namespace {

constexpr int kLanes = 8;

// The largest |x| of a row as float bits with the sign cleared: finite floats order by these
// bits as by their values, and every NaN or infinity lies above kFiniteBitsEnd. Integer work
// that the compiler vectorizes.
constexpr int32_t kFiniteBitsEnd = 0x7f800000;
int32_t max_abs_bits(const float* x, size_t n) {
  int32_t top[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      int32_t bits;
      std::memcpy(&bits, x + i + j, sizeof bits);
      bits &= 0x7fffffff;
      top[j] = top[j] > bits ? top[j] : bits;
    }
  for (; i < n; ++i) {
    int32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    top[0] = std::max(top[0], bits & 0x7fffffff);
  }
  return *std::max_element(top, top + kLanes);
}

// The sum of squares of a row of finite values, in double: lanes in a fixed order, so the
// sum is the same bits on every machine and thread.
double row_squares(const float* x, size_t n) {
  double sq[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const double v = x[i + j];
      sq[j] += v * v;
    }
  for (; i < n; ++i) sq[0] += static_cast<double>(x[i]) * x[i];
  return ((sq[0] + sq[1]) + (sq[2] + sq[3])) + ((sq[4] + sq[5]) + (sq[6] + sq[7]));
}

float float_of_bits(int32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace

void ValueStats::add_row(const float* x, size_t n) {
  count += n;
  const int32_t top = max_abs_bits(x, n);
  if (top < kFiniteBitsEnd) {  // the usual row: every value finite
    compensated_add(sum_squares, sum_squares_carry, row_squares(x, n));
    abs_max = std::max(abs_max, static_cast<double>(float_of_bits(top)));
    return;
  }
  // A row holding NaN or an infinity: its finite values, and the others counted.
  std::vector<float> finite;
  finite.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (std::isnan(v))
      ++nan;
    else if (std::isinf(v))
      ++(v > 0 ? pos_inf : neg_inf);
    else
      finite.push_back(v);
  }
  compensated_add(sum_squares, sum_squares_carry, row_squares(finite.data(), finite.size()));
  abs_max = std::max(abs_max, static_cast<double>(float_of_bits(max_abs_bits(finite.data(), finite.size()))));
}

void ValueStats::add_e4m3_row(const uint8_t* codes, float scale, size_t n, float* scratch) {
  // The magnitude of an e4m3fn code orders as its low 7 bits do, and x -> x * scale rounds
  // monotonically: the largest |value| is that of the largest magnitude code. 0x7f is NaN.
  uint8_t top[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const uint8_t magnitude = codes[i + j] & 0x7f;
      top[j] = top[j] > magnitude ? top[j] : magnitude;
    }
  for (; i < n; ++i) top[0] = std::max<uint8_t>(top[0], codes[i] & 0x7f);
  const uint8_t largest = *std::max_element(top, top + kLanes);
  const float largest_value = std::fabs(e4m3fn_to_float(largest) * scale);
  // A NaN code, a scale that is not finite, or a product too large for a float: the decoded
  // row holds a NaN or an infinity.
  if (largest == 0x7f || !std::isfinite(largest_value)) {
    for (size_t k = 0; k < n; ++k) scratch[k] = e4m3fn_to_float(codes[k]) * scale;
    add_row(scratch, n);
    return;
  }
  // Every decoded square of the row from a table of the 127 magnitudes, summed in add_row's
  // lanes and order: the same bits as squaring the decoded floats.
  static const std::array<float, 128> kMagnitude = [] {
    std::array<float, 128> m{};
    for (uint8_t c = 0; c < 0x7f; ++c) m[c] = e4m3fn_to_float(c);
    return m;
  }();
  double square_of[128];
  for (size_t c = 0; c < 128; ++c) {
    const double v = kMagnitude[c] * scale;
    square_of[c] = v * v;
  }
  double sq[kLanes] = {};
  for (i = 0; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) sq[j] += square_of[codes[i + j] & 0x7f];
  for (; i < n; ++i) sq[0] += square_of[codes[i] & 0x7f];
  count += n;
  compensated_add(sum_squares, sum_squares_carry, ((sq[0] + sq[1]) + (sq[2] + sq[3])) + ((sq[4] + sq[5]) + (sq[6] + sq[7])));
  abs_max = std::max(abs_max, static_cast<double>(largest_value));
}

void ValueStats::merge(const ValueStats& other) {
  count += other.count;
  compensated_add(sum_squares, sum_squares_carry, other.sum_squares);
  compensated_add(sum_squares, sum_squares_carry, other.sum_squares_carry);
  abs_max = std::max(abs_max, other.abs_max);
  nan += other.nan;
  pos_inf += other.pos_inf;
  neg_inf += other.neg_inf;
}

double ValueStats::rms() const {
  const uint64_t n = finite();
  return n == 0 ? 0.0 : std::sqrt((sum_squares + sum_squares_carry) / static_cast<double>(n));
}

int length_bin(uint64_t T) {
  int b = 0;
  while (b + 1 < kLengthBins && (T >> (b + 1)) != 0) ++b;
  return b;
}

void SampleStats::add(const uint8_t* loss_mask, size_t T) {
  uint64_t ones = 0;
  for (size_t t = 0; t < T; ++t) ones += loss_mask[t] != 0;
  min_tokens = samples == 0 ? T : std::min<uint64_t>(min_tokens, T);
  max_tokens = std::max<uint64_t>(max_tokens, T);
  ++samples;
  tokens += T;
  masked += ones;
  all_zero_mask += ones == 0;
  ++length_bins[static_cast<size_t>(length_bin(T))];
}

void SampleStats::merge(const SampleStats& other) {
  if (other.samples == 0) return;
  min_tokens = samples == 0 ? other.min_tokens : std::min(min_tokens, other.min_tokens);
  max_tokens = std::max(max_tokens, other.max_tokens);
  samples += other.samples;
  tokens += other.tokens;
  masked += other.masked;
  all_zero_mask += other.all_zero_mask;
  for (size_t b = 0; b < length_bins.size(); ++b) length_bins[b] += other.length_bins[b];
}

namespace {

static_assert(std::is_trivially_copyable_v<ValueStats> && std::is_trivially_copyable_v<SampleStats>);

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T take(const std::string& in, size_t& at) {
  E3_REQUIRE(at + sizeof(T) <= in.size(), ErrorKind::Internal, "stats: gathered partials end early");
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

}  // namespace

std::string encode_partials(const std::vector<ShardStats>& partials) {
  std::string out;
  put<uint64_t>(out, partials.size());
  for (const ShardStats& s : partials) {
    put(out, s.shard_index);
    put<uint64_t>(out, s.states.size());
    for (const ValueStats& v : s.states) put(out, v);
    put(out, s.samples);
    put(out, s.bytes_read);
  }
  return out;
}

std::vector<ShardStats> decode_partials(const std::string& bytes) {
  size_t at = 0;
  // A count is checked against the bytes left before anything is sized by it.
  const auto count = [&](size_t each) {
    const uint64_t n = take<uint64_t>(bytes, at);
    E3_REQUIRE(n <= (bytes.size() - at) / each, ErrorKind::Internal, "stats: gathered partials end early");
    return static_cast<size_t>(n);
  };
  std::vector<ShardStats> out(count(sizeof(int64_t) + sizeof(uint64_t)));
  for (ShardStats& s : out) {
    s.shard_index = take<int64_t>(bytes, at);
    s.states.resize(count(sizeof(ValueStats)));
    for (ValueStats& v : s.states) v = take<ValueStats>(bytes, at);
    s.samples = take<SampleStats>(bytes, at);
    s.bytes_read = take<uint64_t>(bytes, at);
  }
  E3_REQUIRE(at == bytes.size(), ErrorKind::Internal, "stats: gathered partials are longer than they say");
  return out;
}

void StatsReport::combine(std::vector<ShardStats> all) {
  std::sort(all.begin(), all.end(),
            [](const ShardStats& a, const ShardStats& b) { return a.shard_index < b.shard_index; });
  states.assign(state_names.size(), ValueStats{});
  samples = SampleStats{};
  for (const ShardStats& s : all) {
    E3_REQUIRE(s.states.size() == states.size(), ErrorKind::Internal, "stats: shard {} has {} states, not {}",
               s.shard_index, s.states.size(), states.size());
    for (size_t i = 0; i < states.size(); ++i) states[i].merge(s.states[i]);
    samples.merge(s.samples);
  }
}

namespace {

constexpr size_t kReadChunk = 8 << 20;     // verify's piece size
constexpr size_t kDecodeBlock = 128 << 10;  // bytes of decoded floats at a time

// Per-thread buffers, reused from shard to shard.
struct StatsBuffers {
  std::array<std::vector<unsigned char>, StoredRows::kMaxParts> part;
  std::vector<float> decoded;
  std::vector<uint8_t> mask;
};

// Reads one shard's samples into its partial. HDF5 is asked only where the datasets lie (under
// `hdf5`, the library being built without thread safety); the bytes are read by pread.
class ShardStatsReader {
 public:
  ShardStatsReader(const RunFingerprint& fp, const StorageCodec& codec, std::mutex& hdf5)
      : fp_(fp), codec_(codec), finals_(final_datasets(fp.final_mode)), hdf5_(hdf5) {}

  size_t state_count() const { return fp_.layer_ids.size() + finals_.size(); }

  ShardStats read(const std::filesystem::path& path, int64_t shard_index, StatsBuffers& buf) const {
    const std::string where = path.string();
    require_regular_file(path, ErrorKind::Verify);
    ShardLayout layout;
    {
      std::lock_guard<std::mutex> lock(hdf5_);
      layout = read_shard_layout(path);
    }
    const ShardDescription& d = layout.description;
    E3_STATS_CHECK(d.dtype == fp_.dtype, "{}: dtype '{}' differs from the manifest's '{}'", where, d.dtype, fp_.dtype);
    E3_STATS_CHECK(d.layer_ids == fp_.layer_ids, "{}: its capture ids [{}] differ from the manifest's [{}]", where,
                   fmt::join(d.layer_ids, ","), fmt::join(fp_.layer_ids, ","));
    E3_STATS_CHECK(d.hidden_size > 0, "{}: missing hidden_size", where);
    // O_NONBLOCK: should the name be swapped for a FIFO after the check, open must not wait.
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    E3_STATS_CHECK(fd.get() >= 0, "{}: cannot open: {}", where, std::strerror(errno));
    struct stat st {};
    E3_STATS_CHECK(::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), "{}: not a regular file", where);
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    File file{fd.get(), static_cast<uint64_t>(st.st_size), d.hidden_size};

    ShardStats out;
    out.shard_index = shard_index;
    out.states.resize(state_count());
    const uint64_t K = fp_.layer_ids.size();
    for (const StoredSample& s : layout.samples) {
      const std::string sw = fmt::format("{} sample {:08d}", where, s.index);
      const StoredDataset* mask = s.find("loss_mask");
      E3_STATS_CHECK(mask && mask->element == DType::U8 && mask->dims.size() == 1,
                     "{}: loss_mask is missing or not a 1-D uint8 dataset", sw);
      const uint64_t T = mask->dims[0];
      buf.mask.resize(T);
      read_region(file, *mask, buf.mask.data(), 0, T, sw);
      out.bytes_read += T;
      out.samples.add(buf.mask.data(), T);
      out.bytes_read += states(file, s, "hidden_states", {T, K}, 0, K, sw, out, buf);
      for (size_t j = 0; j < finals_.size(); ++j)
        out.bytes_read += states(file, s, finals_[j].name, {T}, K + j, 1, sw, out, buf);
    }
    return out;
  }

 private:
  struct File {
    int fd;
    uint64_t size;
    int64_t H;
  };

  // Elements [first, first + n) of `d` into out.
  static void read_region(const File& f, const StoredDataset& d, void* out, uint64_t first, uint64_t n,
                          const std::string& sw) {
    const uint64_t esize = dtype_size(d.element);
    E3_STATS_CHECK(d.offset + d.bytes <= f.size, "{}: {} lies past the end of the file", sw, d.name);
    pread_exact(f.fd, out, n * esize, d.offset + first * esize, ErrorKind::Verify, fmt::format("{} {}", sw, d.name));
  }

  // The rows of `state` (rows = [T, K] or [T]) into out.states[first_slot + row % slots];
  // returns the bytes read.
  uint64_t states(const File& f, const StoredSample& s, const std::string& state, const std::vector<uint64_t>& rows,
                  size_t first_slot, uint64_t slots, const std::string& sw, ShardStats& out, StatsBuffers& buf) const {
    const std::vector<StoredPart>& parts = codec_.parts();
    std::array<const StoredDataset*, StoredRows::kMaxParts> stored{};
    for (size_t p = 0; p < parts.size(); ++p) {
      const std::string name = state + parts[p].suffix;
      const StoredDataset* d = s.find(name);
      E3_STATS_CHECK(d != nullptr, "{}: {} is missing", sw, name);
      const std::vector<uint64_t> want = parts[p].dims(rows, f.H);
      E3_STATS_CHECK(d->element == parts[p].element && d->dims == want,
                     "{}: {} is not {} of shape [{}] (it is {} of shape [{}])", sw, name, dtype_name(parts[p].element),
                     fmt::join(want, ", "), dtype_name(d->element), fmt::join(d->dims, ", "));
      stored[p] = d;
    }
    uint64_t total_rows = 1;
    for (uint64_t r : rows) total_rows *= r;
    const size_t h = static_cast<size_t>(f.H);
    const uint64_t chunk_rows = std::max<uint64_t>(1, kReadChunk / codec_.row_bytes(f.H));
    const uint64_t block_rows = std::max<uint64_t>(1, kDecodeBlock / (h * sizeof(float)));
    buf.decoded.resize(block_rows * h);
    uint64_t bytes = 0;
    std::array<const void*, StoredRows::kMaxParts> pointers{};
    for (uint64_t r0 = 0; r0 < total_rows; r0 += chunk_rows) {
      const uint64_t n = std::min(chunk_rows, total_rows - r0);
      for (size_t p = 0; p < parts.size(); ++p) {
        const uint64_t per_row = parts[p].per_column() ? h : 1;
        buf.part[p].resize(n * parts[p].row_bytes(f.H));
        read_region(f, *stored[p], buf.part[p].data(), r0 * per_row, n * per_row, sw);
        pointers[p] = buf.part[p].data();
        bytes += buf.part[p].size();
      }
      // fp8: H codes a row and its float32 scale, summed without decoding each value.
      if (parts.size() == 2 && parts[0].kind == PartKind::E4m3Codes && parts[1].kind == PartKind::RowScale) {
        for (uint64_t i = 0; i < n; ++i)
          out.states[first_slot + (r0 + i) % slots].add_e4m3_row(
              buf.part[0].data() + i * h, load_unaligned<float>(buf.part[1].data(), i), h, buf.decoded.data());
        continue;
      }
      // Decoded a few rows at a time, into a buffer that stays in the cache.
      for (uint64_t b0 = 0; b0 < n; b0 += block_rows) {
        const uint64_t m = std::min(block_rows, n - b0);
        std::array<const void*, StoredRows::kMaxParts> block{};
        for (size_t p = 0; p < parts.size(); ++p)
          block[p] = static_cast<const unsigned char*>(pointers[p]) + b0 * parts[p].row_bytes(f.H);
        codec_.decode(codec_.split({block.data(), parts.size()}, m, f.H), f.H, buf.decoded.data());
        for (uint64_t i = 0; i < m; ++i)
          out.states[first_slot + (r0 + b0 + i) % slots].add_row(buf.decoded.data() + i * h, h);
      }
    }
    return bytes;
  }

  const RunFingerprint fp_;
  const StorageCodec& codec_;
  const std::vector<FinalDataset> finals_;
  std::mutex& hdf5_;
};

struct StatsJob {
  std::filesystem::path path;
  int64_t shard_index = 0;
};

}  // namespace

StatsReport collect_stats(const std::filesystem::path& dir, const StatsOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  silence_hdf5_errors();
  E3_REQUIRE(options.ranks > 0 && options.rank >= 0 && options.rank < options.ranks, ErrorKind::Internal,
             "stats: rank {} of {}", options.rank, options.ranks);
  const std::vector<Manifest> manifests = read_run_manifests(dir);
  const RunFingerprint& fp = manifests.front().fingerprint;
  const StorageCodec* codec = storage_codec_named(fp.dtype);
  E3_STATS_CHECK(codec != nullptr, "{}: unknown dtype '{}'", kManifestName, fp.dtype);
  E3_STATS_CHECK(fp.final_mode == "post-norm" || fp.final_mode == "pre-norm" || fp.final_mode == "both" ||
                     fp.final_mode == "none",
                 "{}: unknown final mode '{}'", kManifestName, fp.final_mode);

  StatsReport r;
  r.dir = dir;
  r.dtype = fp.dtype;
  r.layer_ids = fp.layer_ids;
  for (size_t k = 0; k < fp.layer_ids.size(); ++k) r.state_names.push_back(fmt::format("hidden_states[:,{}]", k));
  for (const FinalDataset& f : final_datasets(fp.final_mode)) {
    r.state_names.push_back(f.name);
    r.final_norms.push_back(f.norm);
  }
  r.num_samples = manifests.front().num_samples;
  r.part_count = manifests.front().part.count;
  r.parts = static_cast<int64_t>(manifests.size());
  r.complete = r.parts == r.part_count;
  std::vector<StatsJob> jobs;
  for (const Manifest& m : manifests) {
    check_manifest_structure(m, (dir / manifest_name(m.part)).string(), ErrorKind::Verify);
    r.complete = r.complete && m.complete;
    r.shards_planned += m.num_shards;
    r.skipped += static_cast<int64_t>(m.skipped.size());
    for (const CommittedShard& s : m.shards) {
      ++r.shards_listed;
      r.skipped += static_cast<int64_t>(s.skipped.size());
      if (s.shard_index % options.ranks == options.rank) jobs.push_back({dir / s.file, s.shard_index});
    }
  }
  std::sort(jobs.begin(), jobs.end(), [](const StatsJob& a, const StatsJob& b) { return a.shard_index < b.shard_index; });

  // The pool of verify: the same thread count reads the same files in the same pieces.
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t threads = std::max<size_t>(
      1, std::min(options.threads > 0 ? static_cast<size_t>(options.threads) : cores, jobs.size()));
  std::mutex hdf5;
  const ShardStatsReader reader(fp, *codec, hdf5);
  std::vector<std::optional<ShardStats>> results(jobs.size());
  std::vector<std::optional<Error>> problems(jobs.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&] {
    StatsBuffers buf;
    for (size_t i; (i = next++) < jobs.size();) {
      if (failed) break;
      try {
        results[i] = reader.read(jobs[i].path, jobs[i].shard_index, buf);
      } catch (const Error& e) {
        // HDF5 failing on the file's structure, or its bytes ending early, is a damaged shard.
        problems[i] = e.kind() == ErrorKind::Internal ? e : Error(ErrorKind::Verify, e.what(), e.file(), e.line());
        failed = true;
      } catch (const std::exception& e) {
        problems[i] = Error(ErrorKind::Verify, fmt::format("{}: {}", jobs[i].path.string(), e.what()), __FILE__,
                            __LINE__);
        failed = true;
      }
    }
  };
  {
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
  }
  for (const auto& p : problems)
    if (p) throw *p;  // the first in shard order
  for (auto& s : results) {
    r.bytes_read += s->bytes_read;
    r.partials.push_back(std::move(*s));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace e3::io
