#include "model/blocks.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"

namespace e3::model {

using kernels::Tensor;

void WorkspaceNeeds::need(Scratch s, int64_t cols, DType dtype) {
  size_t& b = bytes_per_token[static_cast<size_t>(s)];
  b = std::max(b, static_cast<size_t>(cols) * dtype_size(dtype));
}

void WorkspaceNeeds::need_dequant(const LinearWeight& w) {
  if (w.quantized()) dequant_elems = std::max(dequant_elems, w.rows * w.cols);
}

void apply_linear(StepContext& ctx, Tensor x, const LinearWeight& w, const Tensor* bias, Tensor y) {
  kernels::Backend& be = ctx.backend;
  if (!w.quantized()) return be.linear(x, w.dense, bias, y);
  const Tensor full = ctx.ws.dequant.view(be.compute_dtype(), w.rows, w.cols);
  int64_t row = 0;
  for (const kernels::QuantStack& part : w.parts) {
    be.dequantize(part, full.row_slice(row, part.count * part.rows));
    row += part.count * part.rows;
  }
  be.linear(x, full, bias, y);
}

void WorkspaceNeeds::need_moe(const kernels::MoeScratchShape& m) {
  moe.top_k = std::max(moe.top_k, m.top_k);
  moe.local_experts = std::max(moe.local_experts, m.local_experts);
  moe.hidden = std::max(moe.hidden, m.hidden);
  moe.intermediate = std::max(moe.intermediate, m.intermediate);
  moe.quantized = moe.quantized || m.quantized;
}

size_t Workspace::bytes() const {
  size_t n = ids.bytes() + positions.bytes() + cu_seqlens.bytes() + residual.bytes() + normed.bytes() +
             normed_f32.bytes() + partial.bytes() + dequant.bytes();
  for (const kernels::DeviceBuffer& b : scratch) n += b.bytes();
  return n;
}

namespace {

// One expert's projections: `patterns` with the expert id filled in.
MlpNames expert_names(const MlpNames& patterns, int64_t expert) {
  auto fill = [&](const std::string& p) { return fmt::format(fmt::runtime(p), expert); };
  return {fill(patterns.gate), fill(patterns.up), fill(patterns.down)};
}

WeightSpec fp32(WeightSpec s) {
  s.keep_fp32 = true;
  return s;
}

class GqaAttention final : public AttentionBlock {
 public:
  GqaAttention(const GqaShape& shape, const GqaNames& names, TpSlice tp, WeightLoader& loader, WorkspaceNeeds& needs,
               DType dt)
      : s_(shape) {
    const int64_t H = s_.hidden, hd = s_.head_dim;
    heads_ = s_.num_heads / tp.size;
    // With fewer KV heads than ranks each rank keeps the one KV head its Q heads read.
    kv_heads_ = std::max<int64_t>(1, s_.num_kv_heads / tp.size);
    const int64_t group = s_.num_heads / s_.num_kv_heads;
    const int64_t q_begin = tp.rank * heads_;
    const int64_t kv_begin = s_.num_kv_heads >= tp.size ? tp.rank * kv_heads_ : q_begin / group;
    const int64_t q_rows = s_.num_heads * hd, kv_rows = s_.num_kv_heads * hd;

    // q, k and v as one [q | k | v] weight: one GEMM per layer instead of three.
    const int64_t qn = heads_ * hd, kvn = kv_heads_ * hd;
    qkv_ = loader.load_linear({WeightSpec::row_block(names.q + ".weight", {q_rows, H}, q_begin * hd, qn),
                               WeightSpec::row_block(names.k + ".weight", {kv_rows, H}, kv_begin * hd, kvn),
                               WeightSpec::row_block(names.v + ".weight", {kv_rows, H}, kv_begin * hd, kvn)});
    o_proj_ = loader.load_linear({WeightSpec::col_block(names.o + ".weight", {H, q_rows}, q_begin * hd, qn)});
    needs.need_dequant(qkv_);
    needs.need_dequant(o_proj_);
    if (s_.qkv_bias) {
      qkv_bias_ = loader.allocate(1, qn + 2 * kvn);
      loader.load_into(WeightSpec::row_block(names.q + ".bias", {q_rows}, q_begin * hd, qn), qkv_bias_.col_slice(0, qn));
      loader.load_into(WeightSpec::row_block(names.k + ".bias", {kv_rows}, kv_begin * hd, kvn),
                       qkv_bias_.col_slice(qn, kvn));
      loader.load_into(WeightSpec::row_block(names.v + ".bias", {kv_rows}, kv_begin * hd, kvn),
                       qkv_bias_.col_slice(qn + kvn, kvn));
    }
    // The output bias is added once: by TP rank 0, before the all-reduce, in the fp32 partial.
    if (s_.o_bias) {
      Tensor b = loader.load(fp32(WeightSpec::replicated(names.o + ".bias", {H})));
      if (tp.rank == 0) o_bias_ = b;
    }
    if (s_.qk_norm) {
      q_norm_ = loader.load(WeightSpec::replicated(names.q_norm, {hd}));
      k_norm_ = loader.load(WeightSpec::replicated(names.k_norm, {hd}));
    }
    needs.need(Scratch::Qkv, qn + 2 * kvn, dt);
    needs.need(Scratch::AttnOut, qn, dt);
  }

  void forward(Tensor normed, Tensor out, StepContext& ctx) override {
    kernels::Backend& be = ctx.backend;
    const DType dt = normed.dtype;
    const int64_t M = ctx.tokens, hd = s_.head_dim;
    const int64_t qn = heads_ * hd, kvn = kv_heads_ * hd;
    Tensor qkv = ctx.ws.view(Scratch::Qkv, dt, M, qn + 2 * kvn);
    Tensor q = qkv.col_slice(0, qn), k = qkv.col_slice(qn, kvn), v = qkv.col_slice(qn + kvn, kvn);
    Tensor o = ctx.ws.view(Scratch::AttnOut, dt, M, qn);
    apply_linear(ctx, normed, qkv_, s_.qkv_bias ? &qkv_bias_ : nullptr, qkv);
    if (s_.qk_norm) {
      be.rmsnorm_heads(q, static_cast<int>(hd), q_norm_, s_.norm_eps);
      be.rmsnorm_heads(k, static_cast<int>(hd), k_norm_, s_.norm_eps);
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
    apply_linear(ctx, o, o_proj_, o_bias_.data ? &o_bias_ : nullptr, out);
  }

 private:
  GqaShape s_;
  int64_t heads_ = 0, kv_heads_ = 0;
  LinearWeight qkv_;     // [(heads + 2 kv_heads) * head_dim, H]: q | k | v rows
  LinearWeight o_proj_;  // [H, heads * head_dim]
  Tensor qkv_bias_;  // [1, (heads + 2 kv_heads) * head_dim]
  Tensor o_bias_;    // [1, H], TP rank 0 only
  Tensor q_norm_;   // [1, head_dim]
  Tensor k_norm_;   // [1, head_dim]
};

class MlaAttention final : public AttentionBlock {
 public:
  MlaAttention(const MlaShape& shape, const MlaNames& names, TpSlice tp, WeightLoader& loader, WorkspaceNeeds& needs,
               DType dt)
      : s_(shape) {
    const int64_t H = s_.hidden, qk = s_.nope_dim + s_.rope_dim;
    heads_ = s_.num_heads / tp.size;
    const int64_t h0 = tp.rank * heads_;
    const int64_t kv_a_rows = s_.kv_lora_rank + s_.rope_dim;
    if (s_.q_lora_rank > 0) {
      q_a_ = loader.load_linear({WeightSpec::replicated(names.q_a + ".weight", {s_.q_lora_rank, H})});
      if (s_.bias) q_a_bias_ = loader.load(WeightSpec::replicated(names.q_a + ".bias", {s_.q_lora_rank}));
      q_a_norm_ = loader.load(WeightSpec::replicated(names.q_a_norm + ".weight", {s_.q_lora_rank}));
      q_b_ = loader.load_linear(
          {WeightSpec::row_block(names.q_b + ".weight", {s_.num_heads * qk, s_.q_lora_rank}, h0 * qk, heads_ * qk)});
      needs.need(Scratch::QLatent, s_.q_lora_rank, dt);
    } else {
      q_b_ = loader.load_linear(
          {WeightSpec::row_block(names.q + ".weight", {s_.num_heads * qk, H}, h0 * qk, heads_ * qk)});
    }
    kv_a_ = loader.load_linear({WeightSpec::replicated(names.kv_a + ".weight", {kv_a_rows, H})});
    if (s_.bias) kv_a_bias_ = loader.load(WeightSpec::replicated(names.kv_a + ".bias", {kv_a_rows}));
    kv_a_norm_ = loader.load(WeightSpec::replicated(names.kv_a_norm + ".weight", {s_.kv_lora_rank}));
    const int64_t kv_b_per_head = s_.nope_dim + s_.v_dim;
    kv_b_ = loader.load_linear({WeightSpec::row_block(names.kv_b + ".weight",
                                                      {s_.num_heads * kv_b_per_head, s_.kv_lora_rank},
                                                      h0 * kv_b_per_head, heads_ * kv_b_per_head)});
    o_ = loader.load_linear({WeightSpec::col_block(names.o + ".weight", {H, s_.num_heads * s_.v_dim}, h0 * s_.v_dim,
                                                   heads_ * s_.v_dim)});
    for (const LinearWeight* w : {&q_a_, &q_b_, &kv_a_, &kv_b_, &o_}) needs.need_dequant(*w);
    if (s_.bias) {
      Tensor b = loader.load(fp32(WeightSpec::replicated(names.o + ".bias", {H})));
      if (tp.rank == 0) o_bias_ = b;
    }
    needs.need(Scratch::KvCompressed, kv_a_rows, dt);
    needs.need(Scratch::KvLatent, s_.kv_lora_rank, dt);
    needs.need(Scratch::KvExpanded, heads_ * kv_b_per_head, dt);
    needs.need(Scratch::Q, heads_ * qk, dt);
    needs.need(Scratch::K, heads_ * qk, dt);
    needs.need(Scratch::V, heads_ * s_.v_dim, dt);
    needs.need(Scratch::AttnOut, heads_ * s_.v_dim, dt);
  }

  void forward(Tensor normed, Tensor out, StepContext& ctx) override {
    kernels::Backend& be = ctx.backend;
    const DType dt = normed.dtype;
    const int64_t M = ctx.tokens, qk = s_.nope_dim + s_.rope_dim;
    const int heads = static_cast<int>(heads_);
    Tensor q = ctx.ws.view(Scratch::Q, dt, M, heads_ * qk);
    if (s_.q_lora_rank > 0) {
      Tensor q_lat = ctx.ws.view(Scratch::QLatent, dt, M, s_.q_lora_rank);
      apply_linear(ctx, normed, q_a_, s_.bias ? &q_a_bias_ : nullptr, q_lat);
      be.rmsnorm(q_lat, q_a_norm_, s_.lora_norm_eps, q_lat);
      apply_linear(ctx, q_lat, q_b_, nullptr, q);
    } else {
      apply_linear(ctx, normed, q_b_, nullptr, q);
    }
    Tensor ckv = ctx.ws.view(Scratch::KvCompressed, dt, M, s_.kv_lora_rank + s_.rope_dim);
    apply_linear(ctx, normed, kv_a_, s_.bias ? &kv_a_bias_ : nullptr, ckv);
    Tensor kv_lat = ctx.ws.view(Scratch::KvLatent, dt, M, s_.kv_lora_rank);
    be.rmsnorm(ckv.col_slice(0, s_.kv_lora_rank), kv_a_norm_, s_.lora_norm_eps, kv_lat);
    Tensor k_rot = ckv.col_slice(s_.kv_lora_rank, s_.rope_dim);
    const int rope = static_cast<int>(s_.rope_dim);
    be.rope(k_rot, {1, rope, 0, rope, s_.interleaved}, ctx.rope, ctx.seqs);
    be.rope(q, {heads, static_cast<int>(qk), static_cast<int>(s_.nope_dim), rope, s_.interleaved}, ctx.rope, ctx.seqs);

    Tensor kv = ctx.ws.view(Scratch::KvExpanded, dt, M, heads_ * (s_.nope_dim + s_.v_dim));
    apply_linear(ctx, kv_lat, kv_b_, nullptr, kv);
    Tensor k = ctx.ws.view(Scratch::K, dt, M, heads_ * qk);
    Tensor v = ctx.ws.view(Scratch::V, dt, M, heads_ * s_.v_dim);
    be.mla_expand_kv(kv, k_rot, heads, static_cast<int>(s_.nope_dim), static_cast<int>(s_.v_dim), k, v);

    Tensor o = ctx.ws.view(Scratch::AttnOut, dt, M, heads_ * s_.v_dim);
    kernels::AttentionParams ap;
    ap.num_q_heads = ap.num_kv_heads = heads;
    ap.qk_head_dim = static_cast<int>(qk);
    ap.v_head_dim = static_cast<int>(s_.v_dim);
    ap.scale = s_.scale;
    be.attention(q, k, v, o, ap, ctx.seqs);
    apply_linear(ctx, o, o_, o_bias_.data ? &o_bias_ : nullptr, out);
  }

 private:
  MlaShape s_;
  int64_t heads_ = 0;
  LinearWeight q_a_;  // [q_lora_rank, H], replicated
  Tensor q_a_bias_;   // [1, q_lora_rank]
  Tensor q_a_norm_;   // [1, q_lora_rank]
  LinearWeight q_b_;  // [heads * (nope + rope), q_lora_rank], or q_proj [heads * (nope + rope), H]
  LinearWeight kv_a_;  // [kv_lora_rank + rope, H], replicated
  Tensor kv_a_bias_;  // [1, kv_lora_rank + rope]
  Tensor kv_a_norm_;  // [1, kv_lora_rank]
  LinearWeight kv_b_;  // [heads * (nope + v), kv_lora_rank]
  LinearWeight o_;     // [H, heads * v]
  Tensor o_bias_;     // [1, H], TP rank 0 only
};

class SwigluMlp final : public FfnBlock {
 public:
  SwigluMlp(const MlpShape& shape, const MlpNames& names, TpSlice tp, WeightLoader& loader, WorkspaceNeeds& needs,
            DType dt)
      : s_(shape) {
    const int64_t H = s_.hidden, I = s_.intermediate;
    local_ = I / tp.size;
    const int64_t begin = tp.rank * local_;
    // gate and up as one [gate | up] weight: one GEMM instead of two.
    gate_up_ = loader.load_linear({WeightSpec::row_block(names.gate + ".weight", {I, H}, begin, local_),
                                   WeightSpec::row_block(names.up + ".weight", {I, H}, begin, local_)});
    down_ = loader.load_linear({WeightSpec::col_block(names.down + ".weight", {H, I}, begin, local_)});
    needs.need_dequant(gate_up_);
    needs.need_dequant(down_);
    if (s_.bias) {
      gate_up_bias_ = loader.allocate(1, 2 * local_);
      loader.load_into(WeightSpec::row_block(names.gate + ".bias", {I}, begin, local_),
                       gate_up_bias_.col_slice(0, local_));
      loader.load_into(WeightSpec::row_block(names.up + ".bias", {I}, begin, local_),
                       gate_up_bias_.col_slice(local_, local_));
      Tensor b = loader.load(fp32(WeightSpec::replicated(names.down + ".bias", {H})));
      if (tp.rank == 0) down_bias_ = b;
    }
    needs.need(Scratch::GateUp, 2 * local_, dt);
    needs.need(Scratch::Act, local_, dt);
  }

  void forward(Tensor normed, Tensor out, StepContext& ctx) override {
    kernels::Backend& be = ctx.backend;
    Tensor gate_up = ctx.ws.view(Scratch::GateUp, normed.dtype, ctx.tokens, 2 * local_);
    Tensor act = ctx.ws.view(Scratch::Act, normed.dtype, ctx.tokens, local_);
    apply_linear(ctx, normed, gate_up_, s_.bias ? &gate_up_bias_ : nullptr, gate_up);
    be.silu_mul(gate_up.col_slice(0, local_), gate_up.col_slice(local_, local_), act);
    apply_linear(ctx, act, down_, down_bias_.data ? &down_bias_ : nullptr, out);
  }

 private:
  MlpShape s_;
  int64_t local_ = 0;
  LinearWeight gate_up_;  // [2 I / tp, H]: gate rows then up rows
  LinearWeight down_;     // [H, I / tp]
  Tensor gate_up_bias_;  // [1, 2 I / tp]
  Tensor down_bias_;     // [1, H], TP rank 0 only
};

class MoeFfn final : public FfnBlock {
 public:
  MoeFfn(const MoeShape& shape, const MoeNames& names, TpSlice tp, WeightLoader& loader, WorkspaceNeeds& needs,
         DType dt)
      : s_(shape) {
    const int64_t H = s_.hidden, I = s_.intermediate, E = s_.num_experts;
    // The router runs on every rank for every token: the compute dtype's products (exact for a
    // bf16 checkpoint's weights) summed in fp32, as HF computes it from bf16 hidden states.
    gate_ = loader.load(WeightSpec::replicated(names.gate, {E, H}));
    if (s_.correction_bias) correction_bias_ = loader.load(fp32(WeightSpec::replicated(names.correction_bias, {E})));
    // Expert parallelism: this rank's E / tp experts, each loaded whole, nothing of the others.
    experts_.num_experts = static_cast<int>(E / tp.size);
    experts_.first_expert = tp.rank * experts_.num_experts;
    experts_.intermediate = I;
    const int64_t n = experts_.num_experts;
    if (loader.backend().keeps_weights_quantized()) {
      // Kept as the checkpoint stores them (INT4, FP8) where the backend can: they are most
      // of a large MoE's bytes; moe_experts dequantizes a layer's experts for each call.
      std::vector<std::string> gate_up, down;
      for (int64_t e = 0; e < n; ++e) {
        const MlpNames expert = expert_names(names.expert, experts_.first_expert + e);
        gate_up.push_back(expert.gate + ".weight");
        gate_up.push_back(expert.up + ".weight");
        down.push_back(expert.down + ".weight");
      }
      experts_.gate_up_q = loader.load_quantized(gate_up, I, H);
      if (experts_.gate_up_q.quantized()) experts_.down_q = loader.load_quantized(down, H, I);
      E3_REQUIRE(experts_.gate_up_q.quantized() == experts_.down_q.quantized() || n == 0, ErrorKind::Model,
                 "{}: gate/up and down projections of the experts are not stored the same way", gate_up.front());
    }
    const bool quantized = experts_.gate_up_q.quantized();
    if (!quantized) {
      experts_.gate_up = loader.allocate(n * 2 * I, H);
      experts_.down = loader.allocate(n * H, I);
    }
    for (int64_t e = 0; e < n && !quantized; ++e) {
      const MlpNames expert = expert_names(names.expert, experts_.first_expert + e);
      loader.load_into(WeightSpec::replicated(expert.gate + ".weight", {I, H}), experts_.gate_up.row_slice(2 * e * I, I));
      loader.load_into(WeightSpec::replicated(expert.up + ".weight", {I, H}),
                       experts_.gate_up.row_slice((2 * e + 1) * I, I));
      loader.load_into(WeightSpec::replicated(expert.down + ".weight", {H, I}), experts_.down.row_slice(e * H, H));
    }
    if (s_.shared_intermediate > 0)
      shared_ = std::make_unique<SwigluMlp>(MlpShape{H, s_.shared_intermediate, false}, names.shared, tp, loader,
                                            needs, dt);
    const int64_t k = s_.router.top_k;
    needs.need(Scratch::RouterLogits, E, DType::F32);
    needs.need(Scratch::TopkIds, k, DType::I32);
    needs.need(Scratch::TopkWeights, k, DType::F32);
    if (shared_) needs.need(Scratch::MoeShared, H, DType::F32);
    needs.need_moe({static_cast<int>(k), experts_.num_experts, H, I,
                    quantized && !loader.backend().reads_quantized_experts(experts_)});
  }

  void forward(Tensor normed, Tensor out, StepContext& ctx) override {
    kernels::Backend& be = ctx.backend;
    const int64_t M = ctx.tokens, k = s_.router.top_k;
    Tensor logits = ctx.ws.view(Scratch::RouterLogits, DType::F32, M, s_.num_experts);
    Tensor ids = ctx.ws.view(Scratch::TopkIds, DType::I32, M, k);
    Tensor weights = ctx.ws.view(Scratch::TopkWeights, DType::F32, M, k);
    // The shared experts first: the routed experts' combine adds their output as it writes out.
    Tensor shared;
    if (shared_) {
      shared = ctx.ws.view(Scratch::MoeShared, DType::F32, M, s_.hidden);
      shared_->forward(normed, shared, ctx);
    }
    be.linear(normed, gate_, nullptr, logits);
    be.moe_route(logits, correction_bias_.data ? &correction_bias_ : nullptr, s_.router, ids, weights);
    be.moe_experts(normed, ids, weights, experts_, out, shared, ctx.ws.moe_work);
  }

 private:
  MoeShape s_;
  Tensor gate_;             // [E, H] fp32, replicated
  Tensor correction_bias_;  // [1, E] fp32 (noaux_tc)
  kernels::ExpertStack experts_;  // this rank's experts: gate_up [E/tp * 2I, H], down [E/tp * H, I]
  std::unique_ptr<SwigluMlp> shared_;
};

}  // namespace

std::unique_ptr<AttentionBlock> make_gqa_attention(const GqaShape& shape, const GqaNames& names, TpSlice tp,
                                                   WeightLoader& loader, WorkspaceNeeds& needs) {
  return std::make_unique<GqaAttention>(shape, names, tp, loader, needs, loader.compute_dtype());
}

std::unique_ptr<FfnBlock> make_swiglu_mlp(const MlpShape& shape, const MlpNames& names, TpSlice tp,
                                          WeightLoader& loader, WorkspaceNeeds& needs) {
  return std::make_unique<SwigluMlp>(shape, names, tp, loader, needs, loader.compute_dtype());
}

std::unique_ptr<AttentionBlock> make_mla_attention(const MlaShape& shape, const MlaNames& names, TpSlice tp,
                                                   WeightLoader& loader, WorkspaceNeeds& needs) {
  return std::make_unique<MlaAttention>(shape, names, tp, loader, needs, loader.compute_dtype());
}

std::unique_ptr<FfnBlock> make_moe(const MoeShape& shape, const MoeNames& names, TpSlice tp, WeightLoader& loader,
                                   WorkspaceNeeds& needs) {
  return std::make_unique<MoeFfn>(shape, names, tp, loader, needs, loader.compute_dtype());
}

}  // namespace e3::model
