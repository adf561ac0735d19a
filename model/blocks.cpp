#include "model/blocks.h"

#include <algorithm>
#include <cmath>

#include "kernels/error.h"

namespace e3::model {

using kernels::Tensor;

size_t Workspace::bytes() const {
  size_t n = 0;
  for (const kernels::DeviceBuffer* b : {&ids, &positions, &cu_seqlens, &residual, &normed, &partial, &q, &k, &v,
                                         &attn_out, &gate, &up})
    n += b->bytes();
  return n;
}

void WorkspaceNeeds::merge(const WorkspaceNeeds& o) {
  q_cols = std::max(q_cols, o.q_cols);
  k_cols = std::max(k_cols, o.k_cols);
  v_cols = std::max(v_cols, o.v_cols);
  attn_cols = std::max(attn_cols, o.attn_cols);
  mlp_cols = std::max(mlp_cols, o.mlp_cols);
}

namespace {

class GqaAttention final : public AttentionBlock {
 public:
  GqaAttention(const GqaShape& shape, const GqaNames& names, TpSlice tp, WeightLoader& loader) : s_(shape) {
    const int64_t H = s_.hidden, hd = s_.head_dim;
    heads_ = s_.num_heads / tp.size;
    // With fewer KV heads than ranks each rank keeps the one KV head its Q heads read.
    kv_heads_ = std::max<int64_t>(1, s_.num_kv_heads / tp.size);
    const int64_t group = s_.num_heads / s_.num_kv_heads;
    const int64_t q_begin = tp.rank * heads_;
    const int64_t kv_begin = s_.num_kv_heads >= tp.size ? tp.rank * kv_heads_ : q_begin / group;
    const int64_t q_rows = s_.num_heads * hd, kv_rows = s_.num_kv_heads * hd;

    q_proj_ = loader.load(WeightSpec::row_block(names.q + ".weight", {q_rows, H}, q_begin * hd, heads_ * hd));
    k_proj_ = loader.load(WeightSpec::row_block(names.k + ".weight", {kv_rows, H}, kv_begin * hd, kv_heads_ * hd));
    v_proj_ = loader.load(WeightSpec::row_block(names.v + ".weight", {kv_rows, H}, kv_begin * hd, kv_heads_ * hd));
    o_proj_ = loader.load(WeightSpec::col_block(names.o + ".weight", {H, q_rows}, q_begin * hd, heads_ * hd));
    if (s_.qkv_bias) {
      q_bias_ = loader.load(WeightSpec::row_block(names.q + ".bias", {q_rows}, q_begin * hd, heads_ * hd));
      k_bias_ = loader.load(WeightSpec::row_block(names.k + ".bias", {kv_rows}, kv_begin * hd, kv_heads_ * hd));
      v_bias_ = loader.load(WeightSpec::row_block(names.v + ".bias", {kv_rows}, kv_begin * hd, kv_heads_ * hd));
    }
    // The output bias is added once: by TP rank 0, before the all-reduce.
    if (s_.o_bias) {
      Tensor b = loader.load(WeightSpec::replicated(names.o + ".bias", {H}));
      if (tp.rank == 0) o_bias_ = b;
    }
    if (s_.qk_norm) {
      q_norm_ = loader.load(WeightSpec::replicated(names.q_norm, {hd}));
      k_norm_ = loader.load(WeightSpec::replicated(names.k_norm, {hd}));
    }
  }

  WorkspaceNeeds needs() const {
    WorkspaceNeeds n;
    n.q_cols = n.attn_cols = heads_ * s_.head_dim;
    n.k_cols = n.v_cols = kv_heads_ * s_.head_dim;
    return n;
  }

  void forward(Tensor normed, Tensor out, StepContext& ctx) override {
    kernels::Backend& be = ctx.backend;
    const kernels::DType dt = normed.dtype;
    const int64_t M = ctx.tokens, hd = s_.head_dim;
    Tensor q = ctx.ws.q.view(dt, M, heads_ * hd);
    Tensor k = ctx.ws.k.view(dt, M, kv_heads_ * hd);
    Tensor v = ctx.ws.v.view(dt, M, kv_heads_ * hd);
    Tensor o = ctx.ws.attn_out.view(dt, M, heads_ * hd);
    be.linear(normed, q_proj_, s_.qkv_bias ? &q_bias_ : nullptr, q);
    be.linear(normed, k_proj_, s_.qkv_bias ? &k_bias_ : nullptr, k);
    be.linear(normed, v_proj_, s_.qkv_bias ? &v_bias_ : nullptr, v);
    if (s_.qk_norm) {
      be.rmsnorm(q.reshaped(hd), q_norm_, s_.norm_eps, q.reshaped(hd));
      be.rmsnorm(k.reshaped(hd), k_norm_, s_.norm_eps, k.reshaped(hd));
    }
    kernels::RopeParams rq{static_cast<int>(heads_), static_cast<int>(hd), 0, s_.rot_dim, false};
    kernels::RopeParams rk{static_cast<int>(kv_heads_), static_cast<int>(hd), 0, s_.rot_dim, false};
    be.rope(q, rq, ctx.rope, ctx.seqs);
    be.rope(k, rk, ctx.rope, ctx.seqs);
    kernels::AttentionParams ap;
    ap.num_q_heads = static_cast<int>(heads_);
    ap.num_kv_heads = static_cast<int>(kv_heads_);
    ap.qk_head_dim = ap.v_head_dim = static_cast<int>(hd);
    ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    ap.sliding_window = s_.sliding_window;
    be.attention(q, k, v, o, ap, ctx.seqs);
    be.linear(o, o_proj_, o_bias_.data ? &o_bias_ : nullptr, out);
  }

 private:
  GqaShape s_;
  int64_t heads_ = 0, kv_heads_ = 0;
  Tensor q_proj_;   // [heads * head_dim, H]
  Tensor k_proj_;   // [kv_heads * head_dim, H]
  Tensor v_proj_;   // [kv_heads * head_dim, H]
  Tensor o_proj_;   // [H, heads * head_dim]
  Tensor q_bias_;   // [1, heads * head_dim]
  Tensor k_bias_;   // [1, kv_heads * head_dim]
  Tensor v_bias_;   // [1, kv_heads * head_dim]
  Tensor o_bias_;   // [1, H], TP rank 0 only
  Tensor q_norm_;   // [1, head_dim]
  Tensor k_norm_;   // [1, head_dim]
};

class SwigluMlp final : public FfnBlock {
 public:
  SwigluMlp(const MlpShape& shape, const MlpNames& names, TpSlice tp, WeightLoader& loader) : s_(shape) {
    const int64_t H = s_.hidden, I = s_.intermediate;
    local_ = I / tp.size;
    const int64_t begin = tp.rank * local_;
    gate_ = loader.load(WeightSpec::row_block(names.gate + ".weight", {I, H}, begin, local_));
    up_ = loader.load(WeightSpec::row_block(names.up + ".weight", {I, H}, begin, local_));
    down_ = loader.load(WeightSpec::col_block(names.down + ".weight", {H, I}, begin, local_));
    if (s_.bias) {
      gate_bias_ = loader.load(WeightSpec::row_block(names.gate + ".bias", {I}, begin, local_));
      up_bias_ = loader.load(WeightSpec::row_block(names.up + ".bias", {I}, begin, local_));
      Tensor b = loader.load(WeightSpec::replicated(names.down + ".bias", {H}));
      if (tp.rank == 0) down_bias_ = b;
    }
  }

  WorkspaceNeeds needs() const {
    WorkspaceNeeds n;
    n.mlp_cols = local_;
    return n;
  }

  void forward(Tensor normed, Tensor out, StepContext& ctx) override {
    kernels::Backend& be = ctx.backend;
    Tensor gate = ctx.ws.gate.view(normed.dtype, ctx.tokens, local_);
    Tensor up = ctx.ws.up.view(normed.dtype, ctx.tokens, local_);
    be.linear(normed, gate_, s_.bias ? &gate_bias_ : nullptr, gate);
    be.linear(normed, up_, s_.bias ? &up_bias_ : nullptr, up);
    be.silu_mul(gate, up, gate);
    be.linear(gate, down_, down_bias_.data ? &down_bias_ : nullptr, out);
  }

 private:
  MlpShape s_;
  int64_t local_ = 0;
  Tensor gate_;       // [I / tp, H]
  Tensor up_;         // [I / tp, H]
  Tensor down_;       // [H, I / tp]
  Tensor gate_bias_;  // [1, I / tp]
  Tensor up_bias_;    // [1, I / tp]
  Tensor down_bias_;  // [1, H], TP rank 0 only
};

}  // namespace

std::unique_ptr<AttentionBlock> make_gqa_attention(const GqaShape& shape, const GqaNames& names, TpSlice tp,
                                                   WeightLoader& loader, WorkspaceNeeds& needs) {
  auto block = std::make_unique<GqaAttention>(shape, names, tp, loader);
  needs.merge(block->needs());
  return block;
}

std::unique_ptr<FfnBlock> make_swiglu_mlp(const MlpShape& shape, const MlpNames& names, TpSlice tp,
                                          WeightLoader& loader, WorkspaceNeeds& needs) {
  auto block = std::make_unique<SwigluMlp>(shape, names, tp, loader);
  needs.merge(block->needs());
  return block;
}

}  // namespace e3::model
