#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "kernels/backend.h"
#include "core/error.h"
#include "kernels/ops_cpu.h"

namespace e3::kernels {
namespace {

void free_host(void* p) { std::free(p); }

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : threads_(threads) {
    omp_set_num_threads(threads_);
  }

  std::string name() const override { return "cpu"; }
  std::string device_description() const override {
    return fmt::format("CPU, {} thread{}", threads_, threads_ == 1 ? "" : "s");
  }
  DType compute_dtype() const override { return DType::F32; }

  DeviceBuffer allocate(size_t bytes) override {
    // Loading writes gigabytes into fresh buffers: in 4 KiB pages the page faults took most of
    // the load's time; a large buffer asks for transparent huge pages (one fault per 2 MiB).
    constexpr size_t kHugePage = 2u << 20;
    const size_t align = bytes >= kHugePage ? kHugePage : 64;
    const size_t rounded = (bytes + align - 1) / align * align;
    void* p = rounded ? std::aligned_alloc(align, rounded) : nullptr;
    E3_REQUIRE(p || rounded == 0, ErrorKind::Internal, "out of host memory allocating {} bytes", bytes);
    if (align == kHugePage) ::madvise(p, rounded, MADV_HUGEPAGE);
    return DeviceBuffer(p, bytes, &free_host);
  }

  void upload_float(Tensor dst, const float* host) override {
    E3_REQUIRE(dst.contiguous(), ErrorKind::Internal, "upload to strided {}", dst.shape_str());
    convert_from_float(host, dst.dtype, dst.data, static_cast<size_t>(dst.numel()));
  }
  void upload_raw(Tensor dst, const void* host) override {
    E3_REQUIRE(dst.contiguous(), ErrorKind::Internal, "upload to strided {}", dst.shape_str());
    std::memcpy(dst.data, host, dst.bytes());
  }
  bool memory_on_host() const override { return true; }
  void download_float(Tensor src, float* host) override {
    const size_t elem = dtype_size(src.dtype);
    for (int64_t r = 0; r < src.rows; ++r)
      convert_to_float(static_cast<const char*>(src.data) + static_cast<size_t>(r * src.stride) * elem,
                       src.dtype, host + r * src.cols, static_cast<size_t>(src.cols));
  }
  void synchronize() override {}

  void copy(Tensor src, Tensor dst) override { cpu::copy(src, dst); }
  void encode_e4m3_rows(Tensor src, Tensor dst) override {
    E3_REQUIRE(dst.dtype == DType::U8 && dst.rows == src.rows && dst.cols == src.cols + 4 && dst.contiguous(),
               ErrorKind::Internal, "encode_e4m3_rows {} into {}", src.shape_str(), dst.shape_str());
    std::vector<float> row(static_cast<size_t>(src.cols));
    for (int64_t r = 0; r < src.rows; ++r) {
      convert_to_float(static_cast<const char*>(src.data) + static_cast<size_t>(r * src.stride) * dtype_size(src.dtype),
                       src.dtype, row.data(), row.size());
      encode_e4m3_row(row.data(), src.cols, dst.as<uint8_t>() + r * dst.cols);
    }
  }
  DeviceBuffer allocate_host(size_t bytes) override { return allocate(bytes); }
  uint64_t copy_to_host_async(const void* src, void* dst, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return 0;
  }
  void wait_ticket(uint64_t) override {}
  void fill_random(Tensor t, uint64_t seed, float scale) override { cpu::fill_random(t, seed, scale); }
  void fill_random_quant(const QuantStack& w, uint64_t seed) override { fill_random_quant_host(w, seed); }
  // The CPU backend dequantizes at load (it computes in fp32 anyway); this serves the tests.
  void dequantize(const QuantStack& w, Tensor out) override {
    E3_REQUIRE(out.dtype == DType::F32 && out.contiguous() && out.rows == w.count * w.rows && out.cols == w.cols,
               ErrorKind::Internal, "cpu dequantize into {}", out.shape_str());
    dequantize_stack(w, out.as<float>());
  }
  void embedding(Tensor ids, Tensor table, Tensor out) override { cpu::embedding(ids, table, out); }
  void linear(Tensor x, Tensor w, const Tensor* bias, Tensor y) override { cpu::linear(x, w, bias, y); }
  void rmsnorm(Tensor x, Tensor weight, float eps, Tensor out) override {
    cpu::rmsnorm(x, weight, eps, out);
  }
  void add_rmsnorm(Tensor residual, Tensor x, Tensor weight, float eps, Tensor out, Tensor out_f32) override {
    cpu::add_rmsnorm(residual, x, weight, eps, out, out_f32);
  }
  void rmsnorm_heads(Tensor x, int head_dim, Tensor weight, float eps) override {
    cpu::rmsnorm_heads(x, head_dim, weight, eps);
  }
  void add_inplace(Tensor acc, Tensor x) override { cpu::add_inplace(acc, x); }
  void add_bias(Tensor acc, Tensor bias) override { cpu::add_bias(acc, bias); }
  void rope(Tensor x, const RopeParams& p, const RopeTable& table, const SequenceLayout& seqs) override {
    cpu::rope(x, p, table, seqs);
  }
  void attention(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p,
                 const SequenceLayout& seqs) override {
    cpu::attention(q, k, v, out, p, seqs, attention_scratch_);
  }
  void silu_mul(Tensor gate, Tensor up, Tensor out) override { cpu::silu_mul(gate, up, out); }
  void moe_route(Tensor logits, const Tensor* bias, const RouterParams& p, Tensor ids, Tensor weights) override {
    cpu::moe_route(logits, bias, p, ids, weights);
  }
  void moe_experts(Tensor x, Tensor ids, Tensor weights, const ExpertStack& experts, Tensor out, Tensor shared,
                   Tensor scratch) override {
    E3_REQUIRE(!experts.gate_up_q.quantized(), ErrorKind::Internal, "the CPU backend keeps no experts quantized");
    cpu::moe_experts(x, ids, weights, experts, out, shared, scratch);
  }
  size_t moe_scratch_bytes(int64_t tokens, const MoeScratchShape& shape) const override {
    return cpu::moe_scratch_bytes(tokens, shape);
  }
  void mla_expand_kv(Tensor kv, Tensor k_rot, int heads, int nope_dim, int v_dim, Tensor k, Tensor v) override {
    cpu::mla_expand_kv(kv, k_rot, heads, nope_dim, v_dim, k, v);
  }

 private:
  int threads_;
  std::vector<float> attention_scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace e3::kernels
