#include <algorithm>

#include "kernels/backend.h"
#include "core/error.h"
#include "kernels/moe_scratch.h"
#include "kernels/ops_cpu.h"

namespace e3::kernels {
namespace {

// Lets the model-building code run unchanged to size memory for a config, without weights.
class PlanningBackend final : public Backend {
 public:
  PlanningBackend(DType dtype, bool separate_silu) : dtype_(dtype), separate_silu_(separate_silu) {}
  std::string name() const override { return "plan"; }
  std::string device_description() const override { return "memory planning only"; }
  DType compute_dtype() const override { return dtype_; }
  DeviceBuffer allocate(size_t bytes) override { return DeviceBuffer(nullptr, bytes, nullptr); }
  void upload_float(Tensor, const float*) override {}
  void upload_raw(Tensor, const void*) override {}
  void download_float(Tensor, float*) override { refuse(); }
  void synchronize() override {}
  void copy(Tensor, Tensor) override { refuse(); }
  void encode_e4m3_rows(Tensor, Tensor) override { refuse(); }
  DeviceBuffer allocate_host(size_t bytes) override { return DeviceBuffer(nullptr, bytes, nullptr); }
  uint64_t copy_to_host_async(const void*, void*, size_t) override { refuse(); }
  void wait_ticket(uint64_t) override {}
  void fill_random(Tensor, uint64_t, float) override {}
  void fill_random_quant(const QuantStack&, uint64_t) override {}
  // As the CUDA backend: the planner stands for the GPU in `info`.
  bool keeps_weights_quantized() const override { return dtype_ == DType::BF16; }
  void dequantize(const QuantStack&, Tensor) override { refuse(); }
  void embedding(Tensor, Tensor, Tensor) override { refuse(); }
  void linear(Tensor, Tensor, const Tensor*, Tensor) override { refuse(); }
  void rmsnorm(Tensor, Tensor, float, Tensor) override { refuse(); }
  void add_rmsnorm(Tensor, Tensor, Tensor, float, Tensor, Tensor) override { refuse(); }
  void rmsnorm_heads(Tensor, int, Tensor, float) override { refuse(); }
  void add_inplace(Tensor, Tensor) override { refuse(); }
  void add_bias(Tensor, Tensor) override { refuse(); }
  void rope(Tensor, const RopeParams&, const RopeTable&, const SequenceLayout&) override { refuse(); }
  void attention(Tensor, Tensor, Tensor, Tensor, const AttentionParams&, const SequenceLayout&) override {
    refuse();
  }
  void silu_mul(Tensor, Tensor, Tensor) override { refuse(); }
  void moe_route(Tensor, const Tensor*, const RouterParams&, Tensor, Tensor) override { refuse(); }
  void moe_experts(Tensor, Tensor, Tensor, const ExpertStack&, Tensor, Tensor, Tensor) override { refuse(); }
  // Sized as the backend it stands for sizes it: bf16 is the GPU's carve (E3_MOE_UNFUSED=1 takes
  // [R, 2I] bf16 more for gate|up), fp32 the CPU's.
  size_t moe_scratch_bytes(int64_t tokens, const MoeScratchShape& s) const override {
    if (dtype_ != DType::BF16) return cpu::moe_scratch_bytes(tokens, s);
    return moe_scratch_layout(tokens, s.top_k, s.local_experts, s.hidden, s.intermediate, s.quantized,
                              separate_silu_).bytes;
  }
  void mla_expand_kv(Tensor, Tensor, int, int, int, Tensor, Tensor) override { refuse(); }

 private:
  [[noreturn]] static void refuse() { E3_THROW(ErrorKind::Internal, "the planning backend cannot compute"); }
  DType dtype_;
  bool separate_silu_;
};

}  // namespace

std::unique_ptr<Backend> make_planning_backend(DType compute_dtype, const CudaOptions& options) {
  return std::make_unique<PlanningBackend>(compute_dtype, options.moe_unfused);
}

}  // namespace e3::kernels
