// Llama, Mistral, Qwen2, Qwen3 and Qwen3-MoE: one tensor-name table, GQA attention and a
// SwiGLU MLP or (Qwen3-MoE) routed experts. The differences are flags of the config (biases,
// q/k norm, sliding window, head_dim, which layers are MoE).
#include <fmt/format.h>

#include "model/decoder.h"

namespace e3::model {
namespace {

// The HF tensor names of the Llama family; "{}" is the layer index.
struct LlamaNames {
  static constexpr const char* embed = "model.embed_tokens.weight";
  static constexpr const char* final_norm = "model.norm.weight";
  static constexpr const char* input_norm = "model.layers.{}.input_layernorm.weight";
  static constexpr const char* post_attention_norm = "model.layers.{}.post_attention_layernorm.weight";
  static constexpr const char* q = "model.layers.{}.self_attn.q_proj";
  static constexpr const char* k = "model.layers.{}.self_attn.k_proj";
  static constexpr const char* v = "model.layers.{}.self_attn.v_proj";
  static constexpr const char* o = "model.layers.{}.self_attn.o_proj";
  static constexpr const char* q_norm = "model.layers.{}.self_attn.q_norm.weight";
  static constexpr const char* k_norm = "model.layers.{}.self_attn.k_norm.weight";
  static constexpr const char* gate = "model.layers.{}.mlp.gate_proj";
  static constexpr const char* up = "model.layers.{}.mlp.up_proj";
  static constexpr const char* down = "model.layers.{}.mlp.down_proj";
  static constexpr const char* router = "model.layers.{}.mlp.gate.weight";
  static constexpr const char* experts = "model.layers.{}.mlp.experts.{{}}";  // then the expert id
};

std::string at(const char* pattern, int64_t layer) { return fmt::format(fmt::runtime(pattern), layer); }

}  // namespace

DecoderParts build_llama_family(const ModelConfig& c, TpSlice tp, WeightLoader& loader) {
  using N = LlamaNames;
  const int64_t H = c.hidden_size;
  DecoderParts parts;
  parts.rope = compute_rope_frequencies(c.rope, static_cast<int>(c.head_dim), c.max_position_embeddings);
  parts.embed = loader.load(WeightSpec::replicated(N::embed, {c.vocab_size, H}));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DecoderLayer layer;
    layer.input_norm = loader.load(WeightSpec::replicated(at(N::input_norm, l), {H}));
    layer.post_attention_norm = loader.load(WeightSpec::replicated(at(N::post_attention_norm, l), {H}));

    GqaShape gs;
    gs.hidden = H;
    gs.num_heads = c.num_attention_heads;
    gs.num_kv_heads = c.num_key_value_heads;
    gs.head_dim = c.head_dim;
    gs.rot_dim = parts.rope.rot_dim;
    gs.sliding_window = c.sliding_window[static_cast<size_t>(l)];
    gs.norm_eps = static_cast<float>(c.rms_norm_eps);
    gs.qkv_bias = c.qkv_bias;
    gs.o_bias = c.o_bias;
    gs.qk_norm = c.qk_norm;
    GqaNames gn{at(N::q, l), at(N::k, l), at(N::v, l), at(N::o, l), at(N::q_norm, l), at(N::k_norm, l)};
    layer.attention = make_gqa_attention(gs, gn, tp, loader, parts.needs);

    if (c.moe.num_experts > 0 && c.moe.layer_is_moe[static_cast<size_t>(l)]) {
      MoeShape ms;
      ms.hidden = H;
      ms.num_experts = c.moe.num_experts;
      ms.intermediate = c.moe.moe_intermediate_size;
      ms.router = router_params(c.moe);
      MoeNames mn;
      mn.gate = at(N::router, l);
      mn.expert = at(N::experts, l);
      layer.ffn = make_moe(ms, mn, tp, loader, parts.needs);
    } else {
      MlpShape ms{H, c.intermediate_size, c.mlp_bias};
      MlpNames mn{at(N::gate, l), at(N::up, l), at(N::down, l)};
      layer.ffn = make_swiglu_mlp(ms, mn, tp, loader, parts.needs);
    }
    parts.layers.push_back(std::move(layer));
  }
  parts.final_norm = loader.load(WeightSpec::replicated(N::final_norm, {H}));
  return parts;
}

kernels::RouterParams router_params(const MoeConfig& moe) {
  kernels::RouterParams p;
  p.num_experts = static_cast<int>(moe.num_experts);
  p.top_k = static_cast<int>(moe.experts_per_token);
  p.n_group = static_cast<int>(moe.n_group);
  p.topk_group = static_cast<int>(moe.topk_group);
  p.scoring = moe.scoring == "sigmoid" ? kernels::RouterScoring::Sigmoid : kernels::RouterScoring::Softmax;
  p.select = moe.topk_method == "noaux_tc"               ? kernels::RouterSelect::NoAuxTc
             : moe.topk_method == "group_limited_greedy" ? kernels::RouterSelect::GroupLimitedGreedy
                                                         : kernels::RouterSelect::Greedy;
  p.norm_topk_prob = moe.norm_topk_prob;
  p.routed_scaling_factor = static_cast<float>(moe.routed_scaling_factor);
  return p;
}

}  // namespace e3::model
