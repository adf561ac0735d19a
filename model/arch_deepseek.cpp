// DeepSeek-V2, DeepSeek-V3 and Kimi-K2: multi-head latent attention in every layer; the first
// first_k_dense_replace layers have a dense SwiGLU MLP, the rest routed experts plus shared
// experts.
#include <fmt/format.h>

#include "model/decoder.h"

namespace e3::model {
namespace {

// The HF tensor names of the DeepSeek family; "{}" is the layer index.
struct DeepseekNames {
  static constexpr const char* embed = "model.embed_tokens.weight";
  static constexpr const char* final_norm = "model.norm.weight";
  static constexpr const char* input_norm = "model.layers.{}.input_layernorm.weight";
  static constexpr const char* post_attention_norm = "model.layers.{}.post_attention_layernorm.weight";
  static constexpr const char* q = "model.layers.{}.self_attn.q_proj";
  static constexpr const char* q_a = "model.layers.{}.self_attn.q_a_proj";
  static constexpr const char* q_a_norm = "model.layers.{}.self_attn.q_a_layernorm";
  static constexpr const char* q_b = "model.layers.{}.self_attn.q_b_proj";
  static constexpr const char* kv_a = "model.layers.{}.self_attn.kv_a_proj_with_mqa";
  static constexpr const char* kv_a_norm = "model.layers.{}.self_attn.kv_a_layernorm";
  static constexpr const char* kv_b = "model.layers.{}.self_attn.kv_b_proj";
  static constexpr const char* o = "model.layers.{}.self_attn.o_proj";
  static constexpr const char* gate = "model.layers.{}.mlp.gate_proj";
  static constexpr const char* up = "model.layers.{}.mlp.up_proj";
  static constexpr const char* down = "model.layers.{}.mlp.down_proj";
  static constexpr const char* router = "model.layers.{}.mlp.gate.weight";
  static constexpr const char* correction_bias = "model.layers.{}.mlp.gate.e_score_correction_bias";
  static constexpr const char* experts = "model.layers.{}.mlp.experts.{{}}";  // then the expert id
  static constexpr const char* shared_gate = "model.layers.{}.mlp.shared_experts.gate_proj";
  static constexpr const char* shared_up = "model.layers.{}.mlp.shared_experts.up_proj";
  static constexpr const char* shared_down = "model.layers.{}.mlp.shared_experts.down_proj";
};

std::string at(const char* pattern, int64_t layer) { return fmt::format(fmt::runtime(pattern), layer); }

}  // namespace

DecoderParts build_deepseek(const ModelConfig& c, TpSlice tp, WeightLoader& loader) {
  using N = DeepseekNames;
  const int64_t H = c.hidden_size;
  const MlaConfig& mla = c.mla;
  DecoderParts parts;
  parts.rope = compute_rope_frequencies(c.rope, static_cast<int>(mla.qk_rope_head_dim), c.max_position_embeddings);
  parts.embed = loader.load(WeightSpec::replicated(N::embed, {c.vocab_size, H}));
  // Layers at or past num_hidden_layers (DeepSeek's MTP layer) are never named, so never read.
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DecoderLayer layer;
    layer.input_norm = loader.load(WeightSpec::replicated(at(N::input_norm, l), {H}));
    layer.post_attention_norm = loader.load(WeightSpec::replicated(at(N::post_attention_norm, l), {H}));

    MlaShape as;
    as.hidden = H;
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
    MlaNames an{at(N::q, l),    at(N::q_a, l),       at(N::q_a_norm, l), at(N::q_b, l),
                at(N::kv_a, l), at(N::kv_a_norm, l), at(N::kv_b, l),     at(N::o, l)};
    layer.attention = make_mla_attention(as, an, tp, loader, parts.needs);

    if (c.moe.layer_is_moe[static_cast<size_t>(l)]) {
      MoeShape ms;
      ms.hidden = H;
      ms.num_experts = c.moe.num_experts;
      ms.intermediate = c.moe.moe_intermediate_size;
      ms.shared_intermediate = c.moe.moe_intermediate_size * c.moe.n_shared_experts;
      ms.router = router_params(c.moe);
      ms.correction_bias = c.moe.has_correction_bias();
      MoeNames mn;
      mn.gate = at(N::router, l);
      mn.correction_bias = at(N::correction_bias, l);
      mn.expert = at(N::experts, l);
      mn.shared = {at(N::shared_gate, l), at(N::shared_up, l), at(N::shared_down, l)};
      layer.ffn = make_moe(ms, mn, tp, loader, parts.needs);
    } else {
      MlpShape ms{H, c.intermediate_size, false};
      MlpNames mn{at(N::gate, l), at(N::up, l), at(N::down, l)};
      layer.ffn = make_swiglu_mlp(ms, mn, tp, loader, parts.needs);
    }
    parts.layers.push_back(std::move(layer));
  }
  parts.final_norm = loader.load(WeightSpec::replicated(N::final_norm, {H}));
  return parts;
}

}  // namespace e3::model
