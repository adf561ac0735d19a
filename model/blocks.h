// Layer blocks shared by the architectures. Each block computes this rank's partial output
// of its sub-layer; the decoder sums partials over the TP group with one all-reduce.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "model/weights.h"
#include "parallel/communicator.h"

namespace e3::model {

// Activation memory for one step, sized from the token budget and shared by all layers.
struct Workspace {
  kernels::DeviceBuffer ids, positions, cu_seqlens;  // int32 inputs of the step
  kernels::DeviceBuffer residual;                    // [tokens, H]: the residual stream
  kernels::DeviceBuffer normed;                      // [tokens, H]
  kernels::DeviceBuffer partial;                     // [tokens, H]: a block's output before the all-reduce
  kernels::DeviceBuffer q, k, v, attn_out;           // attention activations
  kernels::DeviceBuffer gate, up;                    // MLP activations
  size_t bytes() const;
};

// Sizes of the per-step scratch each block needs, so the workspace is allocated once.
struct WorkspaceNeeds {
  int64_t q_cols = 0, k_cols = 0, v_cols = 0, attn_cols = 0, mlp_cols = 0;
  void merge(const WorkspaceNeeds& o);
};

// Everything a block sees during one step.
struct StepContext {
  kernels::Backend& backend;
  Workspace& ws;
  const kernels::SequenceLayout& seqs;
  const kernels::RopeTable& rope;
  int64_t tokens;
};

class AttentionBlock {
 public:
  virtual ~AttentionBlock() = default;
  // normed [tokens, H] -> out [tokens, H], this rank's partial sum.
  virtual void forward(kernels::Tensor normed, kernels::Tensor out, StepContext& ctx) = 0;
};

class FfnBlock {
 public:
  virtual ~FfnBlock() = default;
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

}  // namespace e3::model
