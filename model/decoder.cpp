// The one builder that wires a family's pieces into layers: the attention block of its
// attention kind and the FFN its config describes, under its descriptor's tensor names.
#include "model/decoder.h"

#include "model/arch.h"
#include "model/router.h"

namespace e3::model {
namespace {

// Where a layer's blocks are built: what every piece below receives.
struct LayerSite {
  const ModelConfig& config;
  const TensorNames& names;
  int64_t layer;
  TpSlice tp;
  WeightLoader& loader;
  WorkspaceNeeds& needs;
  int rot_dim;  // the rotated columns of each head (RopeFrequencies::rot_dim)

  // This layer's name of `pattern`.
  std::string name(const char* pattern) const { return layer_name(pattern, layer); }
};

std::unique_ptr<AttentionBlock> gqa_attention(const LayerSite& site) {
  const ModelConfig& c = site.config;
  const TensorNames& n = site.names;
  const GqaShape shape{.hidden = c.hidden_size,
                       .num_heads = c.num_attention_heads,
                       .num_kv_heads = c.num_key_value_heads,
                       .head_dim = c.head_dim,
                       .rot_dim = site.rot_dim,
                       .sliding_window = c.sliding_window[static_cast<size_t>(site.layer)],
                       .norm_eps = static_cast<float>(c.rms_norm_eps),
                       .qkv_bias = c.qkv_bias,
                       .o_bias = c.o_bias,
                       .qk_norm = c.qk_norm};
  const GqaNames names{site.name(n.q), site.name(n.k),      site.name(n.v),
                       site.name(n.o), site.name(n.q_norm), site.name(n.k_norm)};
  return make_gqa_attention(shape, names, site.tp, site.loader, site.needs);
}

std::unique_ptr<AttentionBlock> mla_attention(const LayerSite& site) {
  const ModelConfig& c = site.config;
  const MlaConfig& mla = c.mla;
  const TensorNames& n = site.names;
  const MlaShape shape{.hidden = c.hidden_size,
                       .num_heads = c.num_attention_heads,
                       .q_lora_rank = mla.q_lora_rank,
                       .kv_lora_rank = mla.kv_lora_rank,
                       .nope_dim = mla.qk_nope_head_dim,
                       .rope_dim = mla.qk_rope_head_dim,
                       .v_dim = mla.v_head_dim,
                       .interleaved = mla.rope_interleave,
                       .bias = mla.attention_bias,
                       .scale = static_cast<float>(mla.softmax_scale),
                       // HF builds q_a_layernorm and kv_a_layernorm with their default eps, not rms_norm_eps.
                       .lora_norm_eps = 1e-6f};
  const MlaNames names{site.name(n.q),    site.name(n.q_a),       site.name(n.q_a_norm), site.name(n.q_b),
                       site.name(n.kv_a), site.name(n.kv_a_norm), site.name(n.kv_b),     site.name(n.o)};
  return make_mla_attention(shape, names, site.tp, site.loader, site.needs);
}

// The attention block of the family's attention kind: the one place the kind picks a block.
std::unique_ptr<AttentionBlock> attention_block(const LayerSite& site) {
  switch (site.config.attention) {
    case AttentionKind::Gqa: return gqa_attention(site);
    case AttentionKind::Mla: return mla_attention(site);
  }
  E3_THROW(ErrorKind::Internal, "{}: unknown attention kind", site.config.source.string());
}

// Routed experts (with shared experts and the config's router) where the config marks the
// layer MoE, else a dense SwiGLU MLP.
std::unique_ptr<FfnBlock> ffn_block(const LayerSite& site) {
  const ModelConfig& c = site.config;
  const MoeConfig& moe = c.moe;
  const TensorNames& n = site.names;
  if (moe.num_experts > 0 && moe.layer_is_moe[static_cast<size_t>(site.layer)]) {
    const MoeShape shape{.hidden = c.hidden_size,
                         .num_experts = moe.num_experts,
                         .intermediate = moe.moe_intermediate_size,
                         .shared_intermediate = moe.moe_intermediate_size * moe.n_shared_experts,
                         .router = router_params(moe),
                         .correction_bias = moe.has_correction_bias()};
    const MoeNames names{.gate = site.name(n.router),
                         .correction_bias = site.name(n.correction_bias),
                         .expert = {site.name(n.expert_gate), site.name(n.expert_up), site.name(n.expert_down)},
                         .shared = {site.name(n.shared_gate), site.name(n.shared_up), site.name(n.shared_down)}};
    return make_moe(shape, names, site.tp, site.loader, site.needs);
  }
  const MlpShape shape{c.hidden_size, c.intermediate_size, c.mlp_bias};
  const MlpNames names{site.name(n.gate), site.name(n.up), site.name(n.down)};
  return make_swiglu_mlp(shape, names, site.tp, site.loader, site.needs);
}

}  // namespace

DecoderParts build_decoder(const ModelConfig& c, TpSlice tp, WeightLoader& loader) {
  E3_REQUIRE(c.family != nullptr, ErrorKind::Internal, "{}: the config names no architecture", c.source.string());
  const TensorNames& n = *c.family->names;
  const int64_t H = c.hidden_size;
  DecoderParts parts;
  // head_dim is the rotated dimension before partial_rotary_factor (MLA: qk_rope_head_dim).
  parts.rope = compute_rope_frequencies(c.rope, static_cast<int>(c.head_dim), c.max_position_embeddings);
  parts.embed = loader.load(WeightSpec::replicated(n.embed, {c.vocab_size, H}));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerSite site{c, n, l, tp, loader, parts.needs, parts.rope.rot_dim};
    DecoderLayer layer;
    layer.input_norm = loader.load(WeightSpec::replicated(site.name(n.input_norm), {H}));
    layer.post_attention_norm = loader.load(WeightSpec::replicated(site.name(n.post_attention_norm), {H}));
    layer.attention = attention_block(site);
    layer.ffn = ffn_block(site);
    parts.layers.push_back(std::move(layer));
  }
  parts.final_norm = loader.load(WeightSpec::replicated(n.final_norm, {H}));
  return parts;
}

}  // namespace e3::model
