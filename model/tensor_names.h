// A family's tensor names, as its descriptor (model/arch.h) gives them to the decoder builder
// and to the checks of a config against its checkpoint. "{}" is the layer index; in the
// experts' names "{{}}" becomes the expert index once the layer is filled in.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace e3::model {

struct TensorNames {
  const char* embed;
  const char* final_norm;
  const char* input_norm;
  const char* post_attention_norm;
  // GQA
  const char* q;  // projections without ".weight"
  const char* k;
  const char* v;
  const char* o;
  const char* q_norm;  // full names of the per-head norms
  const char* k_norm;
  // MLA (q_proj and o_proj as above)
  const char* q_a;
  const char* q_a_norm;
  const char* q_b;
  const char* kv_a;
  const char* kv_a_norm;
  const char* kv_b;
  // Dense MLP and MoE
  const char* gate;
  const char* up;
  const char* down;
  const char* router;           // full name
  const char* correction_bias;  // full name (noaux_tc)
  const char* expert_gate;      // the routed experts' projections
  const char* expert_up;
  const char* expert_down;
  const char* shared_gate;
  const char* shared_up;
  const char* shared_down;

  // What every layer's names start with: the input norm's name up to the layer index.
  std::string_view layers_prefix() const {
    const std::string_view n = input_norm;
    return n.substr(0, n.find("{}"));
  }
};

// Every supported family stores its text model under HF's names; a family that differs
// brings its own table.
inline constexpr TensorNames kHfTensorNames{
    "model.embed_tokens.weight",
    "model.norm.weight",
    "model.layers.{}.input_layernorm.weight",
    "model.layers.{}.post_attention_layernorm.weight",
    "model.layers.{}.self_attn.q_proj",
    "model.layers.{}.self_attn.k_proj",
    "model.layers.{}.self_attn.v_proj",
    "model.layers.{}.self_attn.o_proj",
    "model.layers.{}.self_attn.q_norm.weight",
    "model.layers.{}.self_attn.k_norm.weight",
    "model.layers.{}.self_attn.q_a_proj",
    "model.layers.{}.self_attn.q_a_layernorm",
    "model.layers.{}.self_attn.q_b_proj",
    "model.layers.{}.self_attn.kv_a_proj_with_mqa",
    "model.layers.{}.self_attn.kv_a_layernorm",
    "model.layers.{}.self_attn.kv_b_proj",
    "model.layers.{}.mlp.gate_proj",
    "model.layers.{}.mlp.up_proj",
    "model.layers.{}.mlp.down_proj",
    "model.layers.{}.mlp.gate.weight",
    "model.layers.{}.mlp.gate.e_score_correction_bias",
    "model.layers.{}.mlp.experts.{{}}.gate_proj",
    "model.layers.{}.mlp.experts.{{}}.up_proj",
    "model.layers.{}.mlp.experts.{{}}.down_proj",
    "model.layers.{}.mlp.shared_experts.gate_proj",
    "model.layers.{}.mlp.shared_experts.up_proj",
    "model.layers.{}.mlp.shared_experts.down_proj",
};

// `pattern` with the layer index filled in (an expert's pattern keeps "{}" for the expert).
inline std::string layer_name(const char* pattern, int64_t layer) {
  return fmt::format(fmt::runtime(pattern), layer);
}

// An expert's `pattern` with the layer and the expert filled in.
inline std::string expert_name(const char* pattern, int64_t layer, int64_t expert) {
  return fmt::format(fmt::runtime(layer_name(pattern, layer)), expert);
}

}  // namespace e3::model
