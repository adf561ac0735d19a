#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda_check.h"
#include "kernels/ops_cuda.h"

namespace e3::kernels {
namespace {

void free_device(void* p) { cudaFree(p); }

// Host -> device copies go through a pinned ring so that they are truly asynchronous: a
// region is reused only after the event of its last copy has passed (long before, in practice).
class UploadRing {
 public:
  static constexpr size_t kBytes = 64ull << 20;
  static constexpr int kSlots = 64;

  UploadRing() {
    E3_CUDA_CHECK(cudaMallocHost(&base_, kBytes));
    for (auto& s : slots_) E3_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
  ~UploadRing() {
    for (auto& s : slots_) cudaEventDestroy(s.done);
    cudaFreeHost(base_);
  }
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;

  void copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (bytes > kBytes / 4) {  // large (weights at load time): plain copy, then wait
      E3_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
      E3_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
    }
    if (offset_ + bytes > kBytes) offset_ = 0;
    Slot& slot = slots_[next_];
    next_ = (next_ + 1) % kSlots;
    // Any earlier copy that used this region of the ring has finished before it is reused.
    for (auto& s : slots_)
      if (s.used && s.offset < offset_ + bytes && offset_ < s.offset + s.bytes) {
        E3_CUDA_CHECK(cudaEventSynchronize(s.done));
        s.used = false;
      }
    if (slot.used) E3_CUDA_CHECK(cudaEventSynchronize(slot.done));
    char* staging = base_ + offset_;
    std::memcpy(staging, src, bytes);
    E3_CUDA_CHECK(cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyHostToDevice, stream));
    E3_CUDA_CHECK(cudaEventRecord(slot.done, stream));
    slot = {offset_, bytes, true, slot.done};
    offset_ += (bytes + 255) / 256 * 256;
  }

 private:
  struct Slot {
    size_t offset = 0, bytes = 0;
    bool used = false;
    cudaEvent_t done = nullptr;
  };
  char* base_ = nullptr;
  size_t offset_ = 0;
  int next_ = 0;
  Slot slots_[kSlots];
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    E3_CUDA_CHECK(cudaSetDevice(device_));
    E3_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaDeviceProp prop{};
    E3_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    name_ = prop.name;
    memory_ = prop.totalGlobalMem;
    cc_ = prop.major * 10 + prop.minor;
    E3_REQUIRE(cc_ >= 80, ErrorKind::Usage, "GPU {} ({}) has compute capability {}.{}; the CUDA backend needs 8.0+",
               device_, name_, prop.major, prop.minor);
    gemm_ = std::make_unique<cuda::Gemm>();
    ring_ = std::make_unique<UploadRing>();
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    ring_.reset();
    gemm_.reset();
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  std::string device_description() const override {
    return fmt::format("GPU {} ({}, sm_{}, {:.0f} GiB)", device_, name_, cc_, static_cast<double>(memory_) / (1u << 30));
  }
  DType compute_dtype() const override { return DType::BF16; }
  void* stream_handle() const override { return stream_; }
  size_t device_memory_used() const override {
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    return total - free_b;
  }

  DeviceBuffer allocate(size_t bytes) override {
    void* p = nullptr;
    if (bytes) {
      const cudaError_t rc = cudaMalloc(&p, bytes);
      if (rc != cudaSuccess) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        E3_THROW(ErrorKind::Model, "out of GPU memory on GPU {}: {:.2f} GiB asked, {:.2f} GiB free of {:.2f}",
                 device_, bytes / 1073741824.0, free_b / 1073741824.0, total / 1073741824.0);
      }
    }
    return DeviceBuffer(p, bytes, &free_device);
  }

  void upload_float(Tensor dst, const float* host) override {
    E3_REQUIRE(dst.contiguous(), ErrorKind::Internal, "upload to strided {}", dst.shape_str());
    staging_.resize(dst.bytes());
    convert_from_float(host, dst.dtype, staging_.data(), static_cast<size_t>(dst.numel()));
    ring_->copy(dst.data, staging_.data(), dst.bytes(), stream_);
  }
  void upload_raw(Tensor dst, const void* host) override {
    E3_REQUIRE(dst.contiguous(), ErrorKind::Internal, "upload to strided {}", dst.shape_str());
    ring_->copy(dst.data, host, dst.bytes(), stream_);
  }
  void download_float(Tensor src, float* host) override {
    const size_t elem = dtype_size(src.dtype);
    staging_.resize(static_cast<size_t>(src.numel()) * elem);
    E3_CUDA_CHECK(cudaMemcpy2DAsync(staging_.data(), static_cast<size_t>(src.cols) * elem, src.data,
                                    static_cast<size_t>(src.stride) * elem, static_cast<size_t>(src.cols) * elem,
                                    static_cast<size_t>(src.rows), cudaMemcpyDeviceToHost, stream_));
    E3_CUDA_CHECK(cudaStreamSynchronize(stream_));
    convert_to_float(staging_.data(), src.dtype, host, static_cast<size_t>(src.numel()));
  }
  void synchronize() override { E3_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  void copy(Tensor src, Tensor dst) override {
    E3_REQUIRE(src.dtype == dst.dtype && src.rows == dst.rows && src.cols == dst.cols, ErrorKind::Internal,
               "copy {} to {}", src.shape_str(), dst.shape_str());
    const size_t e = dtype_size(src.dtype);
    E3_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(dst.stride) * e, src.data,
                                    static_cast<size_t>(src.stride) * e, static_cast<size_t>(src.cols) * e,
                                    static_cast<size_t>(src.rows), cudaMemcpyDeviceToDevice, stream_));
  }
  void fill_random(Tensor t, uint64_t seed, float scale) override {
    if (t.dtype == DType::F32) {  // fp32 weights (correction biases) start at zero
      E3_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
      return;
    }
    cuda::fill_random(t, seed, scale, stream_);
  }
  void embedding(Tensor ids, Tensor table, Tensor out) override { cuda::embedding(ids, table, out, stream_); }
  void linear(Tensor x, Tensor w, const Tensor* bias, Tensor y) override { gemm_->linear(x, w, bias, y, stream_); }
  void rmsnorm(Tensor x, Tensor weight, float eps, Tensor out) override {
    cuda::rmsnorm(x, weight, eps, out, stream_);
  }
  void add_rmsnorm(Tensor residual, Tensor x, Tensor weight, float eps, Tensor out, Tensor out_f32) override {
    cuda::add_rmsnorm(residual, x, weight, eps, out, out_f32, stream_);
  }
  void rmsnorm_heads(Tensor x, int head_dim, Tensor weight, float eps) override {
    cuda::rmsnorm_heads(x, head_dim, weight, eps, stream_);
  }
  void add_inplace(Tensor acc, Tensor x) override { cuda::add_inplace(acc, x, stream_); }
  void add_bias(Tensor acc, Tensor bias) override { cuda::add_bias(acc, bias, stream_); }
  void rope(Tensor x, const RopeParams& p, const RopeTable& table, const SequenceLayout& seqs) override {
    cuda::rope(x, p, table, seqs, stream_);
  }
  void attention(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p,
                 const SequenceLayout& seqs) override {
    cuda::attention(q, k, v, out, p, seqs, stream_);
  }
  void silu_mul(Tensor gate, Tensor up, Tensor out) override { cuda::silu_mul(gate, up, out, stream_); }
  void moe_route(Tensor logits, const Tensor* bias, const RouterParams& p, Tensor ids, Tensor weights) override {
    cuda::moe_route(logits, bias, p, ids, weights, stream_);
  }
  void moe_experts(Tensor x, Tensor ids, Tensor weights, const ExpertStack& experts, Tensor out,
                   Tensor scratch) override {
    cuda::moe_experts(x, ids, weights, experts, out, scratch, stream_);
  }
  size_t moe_scratch_bytes(int64_t tokens, const MoeScratchShape& shape) const override {
    return cuda::moe_scratch_bytes(tokens, shape);
  }
  void mla_expand_kv(Tensor kv, Tensor k_rot, int heads, int nope_dim, int v_dim, Tensor k, Tensor v) override {
    cuda::mla_expand_kv(kv, k_rot, heads, nope_dim, v_dim, k, v, stream_);
  }

 private:
  int device_;
  int cc_ = 0;
  std::string name_;
  size_t memory_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;
  std::unique_ptr<UploadRing> ring_;
  std::vector<char> staging_;  // conversions at load time and for synchronous downloads
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace e3::kernels
