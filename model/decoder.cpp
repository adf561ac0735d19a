// The pieces a family's descriptor combines, and the one builder that wires them into layers.
#include "model/decoder.h"

#include <fmt/format.h>

#include "model/arch.h"
#include "model/router.h"

namespace e3::model {

std::string layer_name(const char* pattern, int64_t layer) { return fmt::format(fmt::runtime(pattern), layer); }

std::unique_ptr<AttentionBlock> gqa_attention_block(const LayerSite& site) {
  const ModelConfig& c = site.config;
  const TensorNames& n = site.names;
  const int64_t l = site.layer;
  GqaShape gs;
  gs.hidden = c.hidden_size;
  gs.num_heads = c.num_attention_heads;
  gs.num_kv_heads = c.num_key_value_heads;
  gs.head_dim = c.head_dim;
  gs.rot_dim = site.rot_dim;
  gs.sliding_window = c.sliding_window[static_cast<size_t>(l)];
  gs.norm_eps = static_cast<float>(c.rms_norm_eps);
  gs.qkv_bias = c.qkv_bias;
  gs.o_bias = c.o_bias;
  gs.qk_norm = c.qk_norm;
  GqaNames gn{layer_name(n.q, l), layer_name(n.k, l), layer_name(n.v, l),
              layer_name(n.o, l), layer_name(n.q_norm, l), layer_name(n.k_norm, l)};
  return make_gqa_attention(gs, gn, site.tp, site.loader, site.needs);
}

std::unique_ptr<AttentionBlock> mla_attention_block(const LayerSite& site) {
  const ModelConfig& c = site.config;
  const MlaConfig& mla = c.mla;
  const TensorNames& n = site.names;
  const int64_t l = site.layer;
  MlaShape as;
  as.hidden = c.hidden_size;
  as.num_heads = c.num_attention_heads;
  as.q_lora_rank = mla.q_lora_rank;
  as.kv_lora_rank = mla.kv_lora_rank;
  as.nope_dim = mla.qk_nope_head_dim;
  as.rope_dim = mla.qk_rope_head_dim;
  as.v_dim = mla.v_head_dim;
  as.interleaved = mla.rope_interleave;
  as.bias = mla.attention_bias;
  as.scale = static_cast<float>(mla.softmax_scale);
  // HF builds q_a_layernorm and kv_a_layernorm with their default eps, not rms_norm_eps.
  as.lora_norm_eps = 1e-6f;
  MlaNames an{layer_name(n.q, l),    layer_name(n.q_a, l),       layer_name(n.q_a_norm, l), layer_name(n.q_b, l),
              layer_name(n.kv_a, l), layer_name(n.kv_a_norm, l), layer_name(n.kv_b, l),     layer_name(n.o, l)};
  return make_mla_attention(as, an, site.tp, site.loader, site.needs);
}

std::unique_ptr<FfnBlock> ffn_block(const LayerSite& site) {
  const ModelConfig& c = site.config;
  const MoeConfig& moe = c.moe;
  const TensorNames& n = site.names;
  const int64_t l = site.layer;
  if (moe.num_experts > 0 && moe.layer_is_moe[static_cast<size_t>(l)]) {
    MoeShape ms;
    ms.hidden = c.hidden_size;
    ms.num_experts = moe.num_experts;
    ms.intermediate = moe.moe_intermediate_size;
    ms.shared_intermediate = moe.moe_intermediate_size * moe.n_shared_experts;
    ms.router = router_params(moe);
    ms.correction_bias = moe.has_correction_bias();
    MoeNames mn;
    mn.gate = layer_name(n.router, l);
    mn.correction_bias = layer_name(n.correction_bias, l);
    mn.expert = layer_name(n.experts, l);
    mn.shared = {layer_name(n.shared_gate, l), layer_name(n.shared_up, l), layer_name(n.shared_down, l)};
    return make_moe(ms, mn, site.tp, site.loader, site.needs);
  }
  MlpShape ms{c.hidden_size, c.intermediate_size, c.mlp_bias};
  MlpNames mn{layer_name(n.gate, l), layer_name(n.up, l), layer_name(n.down, l)};
  return make_swiglu_mlp(ms, mn, site.tp, site.loader, site.needs);
}

DecoderParts build_decoder(const ModelConfig& c, TpSlice tp, WeightLoader& loader) {
  E3_REQUIRE(c.family != nullptr && c.family->attention_block != nullptr, ErrorKind::Internal,
             "{}: the config names no buildable architecture", c.source.string());
  const ArchDescriptor& arch = *c.family;
  const TensorNames& n = *arch.names;
  const int64_t H = c.hidden_size;
  DecoderParts parts;
  // head_dim is the rotated dimension before partial_rotary_factor (MLA: qk_rope_head_dim).
  parts.rope = compute_rope_frequencies(c.rope, static_cast<int>(c.head_dim), c.max_position_embeddings);
  parts.embed = loader.load(WeightSpec::replicated(n.embed, {c.vocab_size, H}));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DecoderLayer layer;
    layer.input_norm = loader.load(WeightSpec::replicated(layer_name(n.input_norm, l), {H}));
    layer.post_attention_norm = loader.load(WeightSpec::replicated(layer_name(n.post_attention_norm, l), {H}));
    const LayerSite site{c, n, l, tp, loader, parts.needs, parts.rope.rot_dim};
    layer.attention = arch.attention_block(site);
    layer.ffn = ffn_block(site);
    parts.layers.push_back(std::move(layer));
  }
  parts.final_norm = loader.load(WeightSpec::replicated(n.final_norm, {H}));
  return parts;
}

}  // namespace e3::model
