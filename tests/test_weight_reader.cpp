// The parallel pread path reproduces exactly the bytes the mapping holds: whole tensors, row
// slices and column slices, for any thread count and for chunks and staging buffers smaller
// than a tensor (or a row); and it fails cleanly where the mapping would crash.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <filesystem>

#include "kernels/backend.h"
#include "core/dtype.h"
#include "model/weights.h"
#include "support/test_support.h"

namespace e3 {
namespace {

using e3::DType;
using kernels::Tensor;

constexpr int64_t kRows = 37, kCols = 300;  // odd sizes: chunks never line up with rows

void write_checkpoint(const std::filesystem::path& dir) {
  std::vector<test::StTensor> t;
  t.push_back({"a.weight", "BF16", {kRows, kCols}, test::bf16_bytes(test::random_floats(kRows * kCols, 1))});
  t.push_back({"b.weight", "F32", {kRows, kCols}, test::f32_bytes(test::random_floats(kRows * kCols, 2))});
  t.push_back({"c.bias", "BF16", {kCols}, test::bf16_bytes(test::random_floats(kCols, 3))});
  test::write_safetensors(dir / "model.safetensors", t);
}

// What the mapping holds for rows [r0, r0 + rows), columns [c0, c0 + cols), packed.
std::vector<uint8_t> mapped_slice(const model::Checkpoint& ckpt, const std::string& name, int64_t r0, int64_t rows,
                                  int64_t c0, int64_t cols) {
  const model::TensorInfo& info = ckpt.require(name);
  const size_t elem = model::st_dtype_size(info.dtype);
  const int64_t full_cols = info.shape.back();
  const uint8_t* base = ckpt.file_of(name).data(info);
  std::vector<uint8_t> out(static_cast<size_t>(rows * cols) * elem);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + static_cast<size_t>(r * cols) * elem, base + static_cast<size_t>((r0 + r) * full_cols + c0) * elem,
                static_cast<size_t>(cols) * elem);
  return out;
}

struct Slice {
  int64_t r0, rows, c0, cols;
};
const Slice kSlices[] = {{0, kRows, 0, kCols}, {5, 11, 0, kCols}, {0, kRows, 100, 150}, {7, 3, 299, 1}, {36, 1, 0, 17}};

TEST(WeightReader, ReadsExactlyTheMappedBytesOfEverySlice) {
  test::TempDir dir;
  write_checkpoint(dir.path());
  const model::Checkpoint ckpt(dir.path());
  const model::SafetensorsFile& file = ckpt.file_of("a.weight");
  const model::TensorInfo& info = ckpt.require("a.weight");
  for (int threads : {1, 3, 8})
    for (uint64_t chunk : {8ull, 200ull, 4096ull, 8ull << 20}) {
      model::ReaderPool pool(threads, chunk);
      for (const Slice& s : kSlices) {
        SCOPED_TRACE(testing::Message() << threads << " threads, chunk " << chunk << ", rows " << s.r0 << "+" << s.rows
                                        << " cols " << s.c0 << "+" << s.cols);
        const model::ByteBlock block{file.file_offset(info) + static_cast<uint64_t>(s.r0 * kCols + s.c0) * 2,
                                     kCols * 2, static_cast<uint64_t>(s.cols) * 2, s.rows};
        std::vector<uint8_t> got(block.bytes(), 0xAB);
        pool.read(file.fd(), file.path().string(), block, got.data());
        EXPECT_EQ(got, mapped_slice(ckpt, "a.weight", s.r0, s.rows, s.c0, s.cols));

        std::vector<float> as_float(static_cast<size_t>(s.rows * s.cols), -7.0f), want(as_float.size());
        pool.read(file.fd(), file.path().string(), block, as_float.data(), true, DType::BF16);
        const std::vector<uint8_t> raw = mapped_slice(ckpt, "a.weight", s.r0, s.rows, s.c0, s.cols);
        convert_to_float(raw.data(), DType::BF16, want.data(), want.size());
        EXPECT_EQ(as_float, want);
      }
    }
}

TEST(WeightReader, ParallelForRunsEveryIndexOnceAndRethrowsTheFirstError) {
  model::ReaderPool pool(4);
  std::vector<int> hits(1000, 0);
  pool.parallel_for(hits.size(), [&](size_t i) { ++hits[i]; });
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 1000);
  EXPECT_THROW(pool.parallel_for(50, [](size_t i) {
    if (i == 17) throw std::runtime_error("task 17");
  }), std::runtime_error);
  pool.parallel_for(3, [&](size_t i) { hits[i] = 5; });  // the pool still works after a failure
  EXPECT_EQ(hits[2], 5);
}

// A device stand-in: memory the host may not write directly, bf16 compute, and uploads that
// land only when their ticket is waited for, so a staging buffer reused too early shows.
class LateUploadBackend final : public kernels::Backend {
 public:
  std::string name() const override { return "late"; }
  std::string device_description() const override { return "late uploads"; }
  DType compute_dtype() const override { return DType::BF16; }
  kernels::DeviceBuffer allocate(size_t bytes) override { return cpu_->allocate(bytes); }
  void upload_float(Tensor dst, const float* host) override {
    convert_from_float(host, dst.dtype, dst.data, static_cast<size_t>(dst.numel()));
  }
  void upload_raw(Tensor dst, const void* host) override { std::memcpy(dst.data, host, dst.bytes()); }
  uint64_t upload_raw_async(void* dst, const void* host, size_t bytes) override {
    pending_.push_back({dst, host, bytes, ++tickets_});
    return tickets_;
  }
  void wait_ticket(uint64_t ticket) override {
    while (!pending_.empty() && pending_.front().ticket <= ticket) {
      const Pending& p = pending_.front();
      std::memcpy(p.dst, p.src, p.bytes);
      pending_.pop_front();
    }
  }
  size_t in_flight() const { return pending_.size(); }
  void download_float(Tensor, float*) override { unused(); }
  void synchronize() override {}
  void copy(Tensor, Tensor) override { unused(); }
  kernels::DeviceBuffer allocate_host(size_t bytes) override { return cpu_->allocate_host(bytes); }
  uint64_t copy_to_host_async(const void*, void*, size_t) override { unused(); }
  void fill_random(Tensor, uint64_t, float) override { unused(); }
  void fill_random_quant(const kernels::QuantStack&, uint64_t) override { unused(); }
  void dequantize(const kernels::QuantStack&, Tensor) override { unused(); }
  void embedding(Tensor, Tensor, Tensor) override { unused(); }
  void linear(Tensor, Tensor, const Tensor*, Tensor) override { unused(); }
  void rmsnorm(Tensor, Tensor, float, Tensor) override { unused(); }
  void add_rmsnorm(Tensor, Tensor, Tensor, float, Tensor, Tensor) override { unused(); }
  void rmsnorm_heads(Tensor, int, Tensor, float) override { unused(); }
  void add_inplace(Tensor, Tensor) override { unused(); }
  void add_bias(Tensor, Tensor) override { unused(); }
  void rope(Tensor, const kernels::RopeParams&, const kernels::RopeTable&, const kernels::SequenceLayout&) override {
    unused();
  }
  void attention(Tensor, Tensor, Tensor, Tensor, const kernels::AttentionParams&,
                 const kernels::SequenceLayout&) override {
    unused();
  }
  void silu_mul(Tensor, Tensor, Tensor) override { unused(); }
  void moe_route(Tensor, const Tensor*, const kernels::RouterParams&, Tensor, Tensor) override { unused(); }
  void moe_experts(Tensor, Tensor, Tensor, const kernels::ExpertStack&, Tensor, Tensor, Tensor) override { unused(); }
  size_t moe_scratch_bytes(int64_t, const kernels::MoeScratchShape&) const override { return 0; }
  void mla_expand_kv(Tensor, Tensor, int, int, int, Tensor, Tensor) override { unused(); }
  void encode_e4m3_rows(Tensor, Tensor) override { unused(); }

 private:
  [[noreturn]] static void unused() { throw std::logic_error("not used while loading"); }
  struct Pending {
    void* dst;
    const void* src;
    size_t bytes;
    uint64_t ticket;
  };
  std::unique_ptr<kernels::Backend> cpu_ = kernels::make_cpu_backend(1);
  std::deque<Pending> pending_;
  uint64_t tickets_ = 0;
};

std::vector<uint8_t> bytes_of(Tensor t) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  return {p, p + t.bytes()};
}

TEST(WeightReader, StagedUploadsGiveTheMappedBytesWithBuffersSmallerThanATensor) {
  test::TempDir dir;
  write_checkpoint(dir.path());
  const model::Checkpoint ckpt(dir.path());
  for (uint64_t staging : {100ull, 1000ull, 64ull << 20})
    for (int threads : {1, 4}) {
      SCOPED_TRACE(testing::Message() << "staging " << staging << ", " << threads << " threads");
      LateUploadBackend backend;
      model::WeightStore store;
      std::vector<std::pair<Tensor, std::vector<uint8_t>>> loaded;
      {
        model::WeightLoader loader(&ckpt, backend, store);
        loader.set_load_threads(threads);
        loader.set_staging_bytes(staging);
        for (const Slice& s : kSlices) {
          const bool rows_only = s.c0 == 0 && s.cols == kCols;
          const model::WeightSpec spec =
              rows_only ? model::WeightSpec::row_block("a.weight", {kRows, kCols}, s.r0, s.rows)
              : s.r0 == 0 && s.rows == kRows ? model::WeightSpec::col_block("a.weight", {kRows, kCols}, s.c0, s.cols)
                                             : model::WeightSpec{"a.weight", {kRows, kCols}, s.r0, s.rows, s.c0, s.cols};
          loaded.emplace_back(loader.load(spec), mapped_slice(ckpt, "a.weight", s.r0, s.rows, s.c0, s.cols));
        }
        loaded.emplace_back(loader.load(model::WeightSpec::row_block("c.bias", {kCols}, 30, 200)),
                            mapped_slice(ckpt, "c.bias", 0, 1, 30, 200));
        loader.finish();
        EXPECT_EQ(backend.in_flight(), 0u);
      }
      for (size_t i = 0; i < loaded.size(); ++i) EXPECT_EQ(bytes_of(loaded[i].first), loaded[i].second) << "weight " << i;
    }
}

TEST(WeightReader, TheCpuBackendReadsIntoPlaceAndCountsTheBytes) {
  test::TempDir dir;
  write_checkpoint(dir.path());
  const model::Checkpoint ckpt(dir.path());
  auto backend = kernels::make_cpu_backend(1);
  model::WeightStore store;
  model::WeightLoader loader(&ckpt, *backend, store);
  loader.set_load_threads(3);
  // F32 as stored (a raw read) and BF16 widened to the CPU's fp32, both a column slice.
  const Tensor f = loader.load(model::WeightSpec::col_block("b.weight", {kRows, kCols}, 10, 200));
  const Tensor b = loader.load(model::WeightSpec::col_block("a.weight", {kRows, kCols}, 10, 200));
  EXPECT_EQ(bytes_of(f), mapped_slice(ckpt, "b.weight", 0, kRows, 10, 200));
  const std::vector<uint8_t> raw = mapped_slice(ckpt, "a.weight", 0, kRows, 10, 200);
  std::vector<float> want(static_cast<size_t>(kRows * 200));
  convert_to_float(raw.data(), DType::BF16, want.data(), want.size());
  EXPECT_EQ(std::memcmp(b.data, want.data(), want.size() * 4), 0);
  EXPECT_EQ(ckpt.bytes_read(), static_cast<uint64_t>(kRows * 200 * (4 + 2)));
}

TEST(WeightReader, AFileCutShortWhileLoadingIsAModelErrorNamingIt) {
  test::TempDir dir;
  write_checkpoint(dir.path());
  const model::Checkpoint ckpt(dir.path());
  const auto file = dir / "model.safetensors";
  // Keep the header and the first tensor's first bytes; the mapping would fault past them.
  std::filesystem::resize_file(file, ckpt.file_of("a.weight").file_offset(ckpt.require("a.weight")) + 10);
  auto backend = kernels::make_cpu_backend(1);
  model::WeightStore store;
  model::WeightLoader loader(&ckpt, *backend, store);
  const auto err = test::error_of([&] { loader.load(model::WeightSpec::replicated("b.weight", {kRows, kCols})); });
  ASSERT_TRUE(err);
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(test::Contains(err->what(), file.string()));
  EXPECT_TRUE(test::Contains(err->what(), "truncated"));
}

}  // namespace
}  // namespace e3
