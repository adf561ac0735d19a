// Layer blocks shared by the architectures. Each block computes this rank's partial output
// of its sub-layer; the decoder sums partials over the TP group with one all-reduce.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/weights.h"
#include "parallel/communicator.h"

namespace e3::model {

// Scratch activations a block may need, each [tokens, cols] for the largest cols any block asks.
enum class Scratch {
  Qkv, Q, K, V, AttnOut,                                   // attention (GQA: fused q|k|v)
  QLatent, KvCompressed, KvLatent, KvExpanded,             // MLA's low-rank path
  GateUp, Act,                                             // MLPs: fused gate|up, then silu(gate) * up
  RouterLogits, TopkIds, TopkWeights, MoeShared, MoeWork,  // MoE
  kCount
};

// Bytes per token of each scratch slot, merged over all blocks so that the workspace is
// allocated once, before the first step. MoeWork is sized by the backend from `moe`.
struct WorkspaceNeeds {
  std::array<size_t, static_cast<size_t>(Scratch::kCount)> bytes_per_token{};
  kernels::MoeScratchShape moe;
  int64_t dequant_elems = 0;  // the largest linear weight kept quantized, dequantized for use
  void need(Scratch s, int64_t cols, DType dtype);
  void need_moe(const kernels::MoeScratchShape& shape);
  void need_dequant(const LinearWeight& w);
};

// Activation memory for one step, sized from the token budget and shared by all layers.
struct Workspace {
  kernels::DeviceBuffer ids, positions, cu_seqlens;  // int32 inputs of the step
  kernels::DeviceBuffer residual;    // [tokens, H] fp32: the residual stream
  kernels::DeviceBuffer normed;      // [tokens, H] compute dtype: a sub-layer's normalised input
  kernels::DeviceBuffer normed_f32;  // [tokens, H] fp32: the final norm's output, as captured
  kernels::DeviceBuffer partial;     // [tokens, H] fp32: a block's output before the all-reduce
  std::array<kernels::DeviceBuffer, static_cast<size_t>(Scratch::kCount)> scratch;
  kernels::Tensor moe_work;  // the MoeWork slot as bytes, for Backend::moe_experts
  kernels::DeviceBuffer dequant;  // a quantized linear weight, dequantized for its GEMM

  kernels::Tensor view(Scratch s, DType dtype, int64_t rows, int64_t cols) const {
    return scratch[static_cast<size_t>(s)].view(dtype, rows, cols);
  }
  size_t bytes() const;
};

// Everything a block sees during one step.
struct StepContext {
  kernels::Backend& backend;
  Workspace& ws;
  const kernels::SequenceLayout& seqs;
  const kernels::RopeTable& rope;
  int64_t tokens;
};

// y = x w^T (+ bias); a quantized weight is first dequantized into the workspace.
void apply_linear(StepContext& ctx, kernels::Tensor x, const LinearWeight& w, const kernels::Tensor* bias,
                  kernels::Tensor y);

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  // normed [tokens, H] -> out [tokens, H] fp32, this rank's partial sum.
  virtual void forward(kernels::Tensor normed, kernels::Tensor out, StepContext& ctx) = 0;
};

class FfnBlock {
 public:
  virtual ~FfnBlock() = default;
  // out is fp32: this rank's partial sum of the sub-layer's output.
  virtual void forward(kernels::Tensor normed, kernels::Tensor out, StepContext& ctx) = 0;
};

// Which slice of the heads / features a rank owns.
struct TpSlice {
  int rank = 0;
  int size = 1;
};

// Grouped-query attention with optional q/k/v/o bias, per-head q/k RMSNorm, RoPE and a
// sliding window. Q heads split evenly; KV heads split, or replicated when fewer than ranks.
struct GqaShape {
  int64_t hidden = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int rot_dim = 0;
  int64_t sliding_window = 0;
  float norm_eps = 1e-6f;
  bool qkv_bias = false, o_bias = false, qk_norm = false;
};
struct GqaNames {  // full tensor names of one layer
  std::string q, k, v, o;       // "<prefix>.q_proj" etc, without ".weight"
  std::string q_norm, k_norm;   // full names of the per-head norms (qk_norm only)
};
std::unique_ptr<AttentionBlock> make_gqa_attention(const GqaShape& shape, const GqaNames& names, TpSlice tp,
                                                   WeightLoader& loader, WorkspaceNeeds& needs);

// SwiGLU MLP: down(silu(gate(x)) * up(x)); gate/up split by rows, down by columns.
struct MlpShape {
  int64_t hidden = 0, intermediate = 0;
  bool bias = false;
};
struct MlpNames {
  std::string gate, up, down;  // without ".weight"
};
std::unique_ptr<FfnBlock> make_swiglu_mlp(const MlpShape& shape, const MlpNames& names, TpSlice tp,
                                          WeightLoader& loader, WorkspaceNeeds& needs);

// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2). Heads split over ranks; the
// low-rank a-projections and their norms are replicated.
struct MlaShape {
  int64_t hidden = 0, num_heads = 0;
  int64_t q_lora_rank = 0, kv_lora_rank = 0;  // q_lora_rank 0: a plain q_proj
  int64_t nope_dim = 0, rope_dim = 0, v_dim = 0;
  bool interleaved = true;
  bool bias = false;         // q_a_proj, kv_a_proj_with_mqa, o_proj
  float scale = 1.0f;
  float lora_norm_eps = 1e-6f;
};
struct MlaNames {  // without ".weight"
  std::string q, q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b, o;
};
std::unique_ptr<AttentionBlock> make_mla_attention(const MlaShape& shape, const MlaNames& names, TpSlice tp,
                                                   WeightLoader& loader, WorkspaceNeeds& needs);

// Routed experts (expert-parallel: each rank owns num_experts / tp of them and runs them for
// all tokens) plus optional shared experts (a SwiGLU MLP split Megatron-style). Both add to
// the same partial output, so the layer keeps its one all-reduce.
struct MoeShape {
  int64_t hidden = 0, num_experts = 0, intermediate = 0;
  int64_t shared_intermediate = 0;  // 0: no shared experts
  kernels::RouterParams router;
  bool correction_bias = false;
};
struct MoeNames {
  std::string gate;             // router weight, full name
  std::string correction_bias;  // full name (noaux_tc)
  MlpNames expert;              // each with "{}" for the expert id
  MlpNames shared;
};
std::unique_ptr<FfnBlock> make_moe(const MoeShape& shape, const MoeNames& names, TpSlice tp, WeightLoader& loader,
                                   WorkspaceNeeds& needs);

}  // namespace e3::model
