#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda_check.h"
#include "kernels/ops_cuda.h"

namespace e3::kernels {
namespace {

void free_device(void* p) { cudaFree(p); }
void free_pinned(void* p) { cudaFreeHost(p); }

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

// Per-op GPU time from events around each op (E3_PROFILE=1): where a step's time goes.
class OpProfiler {
 public:
  static constexpr int kPairs = 4096;

  explicit OpProfiler(cudaStream_t stream) : stream_(stream) {
    for (auto& p : pairs_) {
      E3_CUDA_CHECK(cudaEventCreate(&p.begin));
      E3_CUDA_CHECK(cudaEventCreate(&p.end));
    }
  }
  ~OpProfiler() {
    for (auto& p : pairs_) {
      cudaEventDestroy(p.begin);
      cudaEventDestroy(p.end);
    }
  }
  int begin(const char* name) {
    if (used_ == kPairs) collect();
    Pair& p = pairs_[used_];
    p.name = name;
    E3_CUDA_CHECK(cudaEventRecord(p.begin, stream_));
    return used_++;
  }
  void end(int i) { E3_CUDA_CHECK(cudaEventRecord(pairs_[i].end, stream_)); }
  void reset() {
    collect();
    totals_.clear();
  }
  // A stable name for a label made at run time.
  const char* label(std::string name) { return labels_.insert(std::move(name)).first->c_str(); }
  std::string report() {
    collect();
    double total = 0;
    for (const auto& [name, t] : totals_) total += t.ms;
    std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    std::string out = fmt::format("{:<32} {:>8} {:>12} {:>7}\n", "op", "calls", "total ms", "share");
    for (const auto& [name, t] : rows)
      out += fmt::format("{:<32} {:>8} {:>12.2f} {:>6.1f}%\n", name, t.calls, t.ms, 100.0 * t.ms / std::max(total, 1e-9));
    return out;
  }

 private:
  struct Pair {
    const char* name = nullptr;
    cudaEvent_t begin = nullptr, end = nullptr;
  };
  struct Total {
    int64_t calls = 0;
    double ms = 0;
  };
  void collect() {
    E3_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int i = 0; i < used_; ++i) {
      float ms = 0;
      E3_CUDA_CHECK(cudaEventElapsedTime(&ms, pairs_[i].begin, pairs_[i].end));
      Total& t = totals_[pairs_[i].name];
      ++t.calls;
      t.ms += ms;
    }
    used_ = 0;
  }
  cudaStream_t stream_;
  std::array<Pair, kPairs> pairs_{};
  int used_ = 0;
  std::map<std::string, Total> totals_;
  std::set<std::string> labels_;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, const CudaOptions& options) : device_(device) {
    E3_CUDA_CHECK(cudaSetDevice(device_));
    E3_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaDeviceProp prop{};
    E3_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    name_ = prop.name;
    memory_ = prop.totalGlobalMem;
    cc_ = prop.major * 10 + prop.minor;
    E3_REQUIRE(cc_ >= 80, ErrorKind::Usage, "GPU {} ({}) has compute capability {}.{}; the CUDA backend needs 8.0+",
               device_, name_, prop.major, prop.minor);
    hopper_gemm_ = cuda::hopper_grouped_gemm_built(device_);
    moe_.gemm_variant = cuda::resolve_gemm_variant(options.gemm_variant, hopper_gemm_);
    // The wgmma attention lives in the same sm_90a image as the Hopper grouped GEMM.
    E3_REQUIRE(options.attention_variant != CudaOptions::kWgmmaAttention || hopper_gemm_, ErrorKind::Usage,
               "E3_ATTENTION_VARIANT=1 needs an sm_90 GPU and a binary built with the sm_90a image (GPU {} is {}, sm_{})",
               device_, name_, cc_);
    wgmma_attention_ = options.attention_variant != CudaOptions::kMmaSyncAttention && hopper_gemm_;
    moe_.fuse_silu = !options.moe_unfused;
    const bool counted_walk = hopper_gemm_ && (moe_.gemm_variant == CudaOptions::kHopperWsCountedGemmVariant ||
                                               moe_.gemm_variant == CudaOptions::kHopperWsCountedRegsGemmVariant);
    E3_REQUIRE(counted_walk || (options.l2_sides != CudaOptions::kProbedL2Sides &&
                                options.l2_sides != CudaOptions::kParityL2Sides),
               ErrorKind::Usage,
               "E3_L2_SIDES={} needs the grouped GEMM's counted walk (E3_GEMM_VARIANT 8 or 9, the default on an sm_90 "
               "GPU built with the sm_90a image); GPU {} is {}, sm_{}, with variant {}",
               options.l2_sides, device_, name_, cc_, moe_.gemm_variant);
    if (counted_walk) walk_by_l2_side(options.l2_sides);
    gemm_ = std::make_unique<cuda::Gemm>();
    ring_ = std::make_unique<UploadRing>();
    E3_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    for (Ticket& t : tickets_) {
      E3_CUDA_CHECK(cudaEventCreateWithFlags(&t.ready, cudaEventDisableTiming));
      // start and done time the copy itself (the writer path's account).
      E3_CUDA_CHECK(cudaEventCreate(&t.start));
      E3_CUDA_CHECK(cudaEventCreate(&t.done));
    }
    if (options.profile) profiler_ = std::make_unique<OpProfiler>(stream_);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cudaStreamSynchronize(copy_stream_);
    for (Ticket& t : tickets_) {
      cudaEventDestroy(t.ready);
      cudaEventDestroy(t.start);
      cudaEventDestroy(t.done);
    }
    cudaStreamDestroy(copy_stream_);
    profiler_.reset();
    ring_.reset();
    gemm_.reset();
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda"; }
  std::string device_description() const override {
    return fmt::format("GPU {} ({}, sm_{}, {:.0f} GiB, {} grouped GEMM{}, {} attention)", device_, name_, cc_,
                       static_cast<double>(memory_) / (1u << 30), hopper_gemm_ ? "wgmma" : "mma.sync", l2_walk_,
                       wgmma_attention_ ? "wgmma" : "mma.sync");
  }
  std::string device_id() const override {
    char bus[32] = {};
    E3_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device_));
    return bus;
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
    Timed t(this, "copy");
    E3_REQUIRE(src.rows == dst.rows && src.cols == dst.cols, ErrorKind::Internal, "copy {} to {}", src.shape_str(),
               dst.shape_str());
    if (src.dtype != dst.dtype) return cuda::convert(src, dst, stream_);
    const size_t e = dtype_size(src.dtype);
    E3_CUDA_CHECK(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(dst.stride) * e, src.data,
                                    static_cast<size_t>(src.stride) * e, static_cast<size_t>(src.cols) * e,
                                    static_cast<size_t>(src.rows), cudaMemcpyDeviceToDevice, stream_));
  }
  void encode_e4m3_rows(Tensor src, Tensor dst) override {
    Timed t(this, "encode_e4m3");
    cuda::encode_e4m3_rows(src, dst, stream_);
  }
  DeviceBuffer allocate_host(size_t bytes) override {
    void* p = nullptr;
    if (bytes) E3_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return DeviceBuffer(p, bytes, &free_pinned);
  }
  uint64_t copy_to_host_async(const void* src, void* dst, size_t bytes) override {
    return copy_on_side_stream(dst, src, bytes, cudaMemcpyDeviceToHost);
  }
  uint64_t upload_raw_async(void* dst, const void* src, size_t bytes) override {
    return copy_on_side_stream(dst, src, bytes, cudaMemcpyHostToDevice);
  }
  void wait_ticket(uint64_t ticket) override {
    Ticket& tk = tickets_[ticket % tickets_.size()];
    if (tk.used && tk.ticket == ticket) E3_CUDA_CHECK(cudaEventSynchronize(tk.done));
  }

  double copy_seconds(uint64_t first, uint64_t last) override {
    const Ticket& a = tickets_[first % tickets_.size()];
    const Ticket& b = tickets_[last % tickets_.size()];
    if (!a.used || a.ticket != first || !b.used || b.ticket != last) return 0;  // reused since
    float ms = 0;
    if (cudaEventElapsedTime(&ms, a.start, b.done) != cudaSuccess) {
      (void)cudaGetLastError();  // not complete yet, or not timed: not worth failing a run over
      return 0;
    }
    return ms * 1e-3;
  }

  void fill_random(Tensor t, uint64_t seed, float scale) override {
    if (t.dtype == DType::F32) {  // fp32 weights (correction biases) start at zero
      E3_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
      return;
    }
    cuda::fill_random(t, seed, scale, stream_);
  }
  void embedding(Tensor ids, Tensor table, Tensor out) override {
    Timed t(this, "embedding");
    cuda::embedding(ids, table, out, stream_);
  }
  void linear(Tensor x, Tensor w, const Tensor* bias, Tensor y) override {
    // Profiled per shape: which projection costs what.
    Timed t(this, profiler_ ? profiler_->label(fmt::format("gemm {}x{}x{}{}", x.rows, w.rows, x.cols,
                                                          x.dtype == DType::F32 ? " tf32" : ""))
                            : "gemm");
    gemm_->linear(x, w, bias, y, stream_);
  }
  void rmsnorm(Tensor x, Tensor weight, float eps, Tensor out) override {
    Timed t(this, "rmsnorm");
    cuda::rmsnorm(x, weight, eps, out, stream_);
  }
  void add_rmsnorm(Tensor residual, Tensor x, Tensor weight, float eps, Tensor out, Tensor out_f32) override {
    Timed t(this, "add_rmsnorm");
    cuda::add_rmsnorm(residual, x, weight, eps, out, out_f32, stream_);
  }
  void rmsnorm_heads(Tensor x, int head_dim, Tensor weight, float eps) override {
    Timed t(this, "rmsnorm_heads");
    cuda::rmsnorm_heads(x, head_dim, weight, eps, stream_);
  }
  void add_inplace(Tensor acc, Tensor x) override {
    Timed t(this, "add");
    cuda::add_inplace(acc, x, stream_);
  }
  void add_bias(Tensor acc, Tensor bias) override { cuda::add_bias(acc, bias, stream_); }
  void rope(Tensor x, const RopeParams& p, const RopeTable& table, const SequenceLayout& seqs) override {
    Timed t(this, "rope");
    cuda::rope(x, p, table, seqs, stream_);
  }
  void attention(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p,
                 const SequenceLayout& seqs) override {
    Timed t(this, "attention");
    cuda::attention(q, k, v, out, p, seqs, wgmma_attention_, stream_);
  }
  void silu_mul(Tensor gate, Tensor up, Tensor out) override {
    Timed t(this, "silu_mul");
    cuda::silu_mul(gate, up, out, stream_);
  }
  void moe_route(Tensor logits, const Tensor* bias, const RouterParams& p, Tensor ids, Tensor weights) override {
    Timed t(this, "moe_route");
    cuda::moe_route(logits, bias, p, ids, weights, stream_);
  }
  void moe_experts(Tensor x, Tensor ids, Tensor weights, const ExpertStack& experts, Tensor out, Tensor shared,
                   Tensor scratch) override {
    if (!profiler_)
      return cuda::moe_experts(x, ids, weights, experts, out, shared, scratch, moe_, stream_);
    int open = -1;  // each phase timed on its own
    cuda::moe_experts(x, ids, weights, experts, out, shared, scratch, moe_, stream_,
                      [&](const char* phase) {
      if (open >= 0) profiler_->end(open);
      open = phase ? profiler_->begin(phase) : -1;
    });
  }
  size_t moe_scratch_bytes(int64_t tokens, const MoeScratchShape& shape) const override {
    return cuda::moe_scratch_bytes(tokens, shape, moe_.fuse_silu);
  }
  void mla_expand_kv(Tensor kv, Tensor k_rot, int heads, int nope_dim, int v_dim, Tensor k, Tensor v) override {
    Timed t(this, "mla_expand_kv");
    cuda::mla_expand_kv(kv, k_rot, heads, nope_dim, v_dim, k, v, stream_);
  }

  void fill_random_quant(const QuantStack& w, uint64_t seed) override { cuda::fill_random_quant(w, seed, stream_); }
  bool keeps_weights_quantized() const override { return true; }
  bool reads_quantized_experts(const ExpertStack& ex) const override {
    return cuda::moe_reads_quantized(ex, moe_);
  }
  void set_quantized_experts_in_gemm(bool on) override { moe_.experts_in_gemm = on; }
  void dequantize(const QuantStack& w, Tensor out) override {
    Timed t(this, "dequantize");
    cuda::dequantize(w, out, stream_);
  }

  std::string profile_report() override { return profiler_ ? profiler_->report() : ""; }
  void profile_reset() override {
    if (profiler_) profiler_->reset();
  }

 private:
  // A copy on the side stream after the work issued so far (its source or destination may be in
  // use), so that compute, or the next host read, overlaps it; the ticket's event marks its end.
  // A ticket slot is reused only after its copy finished (the pipeline keeps few in flight).
  uint64_t copy_on_side_stream(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    const uint64_t ticket = next_ticket_++;
    Ticket& tk = tickets_[ticket % tickets_.size()];
    if (tk.used) E3_CUDA_CHECK(cudaEventSynchronize(tk.done));
    E3_CUDA_CHECK(cudaEventRecord(tk.ready, stream_));
    E3_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, tk.ready, 0));
    E3_CUDA_CHECK(cudaEventRecord(tk.start, copy_stream_));
    E3_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream_));
    E3_CUDA_CHECK(cudaEventRecord(tk.done, copy_stream_));
    tk.used = true;
    tk.ticket = ticket;
    return ticket;
  }

  // E3_L2_SIDES: the counted expert GEMM walks from both ends, one per half of L2 (find_l2_sides),
  // where the probe finds two halves (or, for the tests, with even and odd SMs as the halves).
  void walk_by_l2_side(int mode) {
    std::vector<uint8_t> side;
    if (mode == CudaOptions::kParityL2Sides) {
      side.resize(kL2SideSlots);
      for (int sm = 0; sm < kL2SideSlots; ++sm) side[sm] = static_cast<uint8_t>(sm % 2);
      l2_walk_ = ", tiles by L2 side: even and odd SMs";
    } else if (mode == CudaOptions::kProbedL2Sides) {
      const L2Sides found = find_l2_sides(device_);
      if (found.found) side = found.side_of_sm;
      l2_walk_ = found.found ? fmt::format(", tiles by L2 side: {} + {} SMs (weakest correlation {:.2f})",
                                           found.sms[0], found.sms[1], found.weakest)
                             : fmt::format(", no L2 sides found ({} + {} SMs, weakest correlation {:.2f})",
                                           found.sms[0], found.sms[1], found.weakest);
    }
    if (side.empty()) return;
    l2_side_of_sm_ = allocate(side.size());
    E3_CUDA_CHECK(cudaMemcpy(l2_side_of_sm_.data(), side.data(), side.size(), cudaMemcpyHostToDevice));
    moe_.l2_side_of_sm = static_cast<const uint8_t*>(l2_side_of_sm_.data());
  }

  // Brackets one op with profiling events when profiling is on.
  struct Timed {
    Timed(CudaBackend* b, const char* name) : p(b->profiler_.get()), i(p ? p->begin(name) : 0) {}
    ~Timed() {
      if (p) p->end(i);
    }
    OpProfiler* p;
    int i;
  };

  int device_;
  int cc_ = 0;
  bool hopper_gemm_ = false;  // the sm_90a grouped expert GEMM runs on this GPU
  bool wgmma_attention_ = false;  // attention on the sm_90a warpgroup-MMA kernel where its head dims fit
  cuda::MoeKernelChoice moe_;  // E3_GEMM_VARIANT, E3_MOE_UNFUSED, E3_L2_SIDES and --expert-dequant
  DeviceBuffer l2_side_of_sm_;  // uint8 [kL2SideSlots] where the expert GEMM walks by L2 side
  std::string l2_walk_;         // how it walks, for device_description
  std::string name_;
  size_t memory_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::Gemm> gemm_;
  std::unique_ptr<UploadRing> ring_;
  std::unique_ptr<OpProfiler> profiler_;
  std::vector<char> staging_;
  // Device -> host copies of captured states run on their own stream, after the compute
  // stream's work that produced them, so that they overlap the next step.
  cudaStream_t copy_stream_ = nullptr;
  struct Ticket {
    cudaEvent_t ready = nullptr, start = nullptr, done = nullptr;
    uint64_t ticket = 0;
    bool used = false;
  };
  std::array<Ticket, 256> tickets_{};
  uint64_t next_ticket_ = 1;  // conversions at load time and for synchronous downloads
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int device, const CudaOptions& options) {
  return std::make_unique<CudaBackend>(device, options);
}

const char* build_description() { return "CUDA backend for architectures " E3_CUDA_ARCHITECTURES; }

}  // namespace e3::kernels
