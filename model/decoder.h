// The decoder-only transformer loop shared by every architecture: embedding, layers of
// (norm, attention, all-reduce, residual add, norm, FFN, all-reduce, residual add), final
// norm, with capture points between layers. Architectures only say which blocks to build.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/blocks.h"
#include "model/config.h"
#include "model/rope.h"

namespace e3::model {

struct DecoderLayer {
  kernels::Tensor input_norm;           // [1, H]
  kernels::Tensor post_attention_norm;  // [1, H]
  std::unique_ptr<AttentionBlock> attention;
  std::unique_ptr<FfnBlock> ffn;
};

// What an architecture's wiring produces.
struct DecoderParts {
  kernels::Tensor embed;       // [vocab, H], replicated
  kernels::Tensor final_norm;  // [1, H]
  std::vector<DecoderLayer> layers;
  WorkspaceNeeds needs;
  RopeFrequencies rope;
};

// A family's tensor names; "{}" is the layer index. Every supported family stores its text
// model under HF's names, so all share kHfTensorNames; a family that differs brings its own.
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
  const char* experts;          // then ".{expert}" and the projection
  const char* shared_gate;
  const char* shared_up;
  const char* shared_down;
};

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
    "model.layers.{}.mlp.experts.{{}}",
    "model.layers.{}.mlp.shared_experts.gate_proj",
    "model.layers.{}.mlp.shared_experts.up_proj",
    "model.layers.{}.mlp.shared_experts.down_proj",
};

// `pattern` with the layer index filled in.
std::string layer_name(const char* pattern, int64_t layer);

// Where a layer's blocks are built: what every piece below receives.
struct LayerSite {
  const ModelConfig& config;
  const TensorNames& names;
  int64_t layer;
  TpSlice tp;
  WeightLoader& loader;
  WorkspaceNeeds& needs;
  int rot_dim;  // the rotated columns of each head (RopeFrequencies::rot_dim)
};

// The attention variants a family picks from (its descriptor's `attention_block`).
std::unique_ptr<AttentionBlock> gqa_attention_block(const LayerSite& site);
std::unique_ptr<AttentionBlock> mla_attention_block(const LayerSite& site);
// The FFN of a layer: routed experts (with shared experts and the config's router) where the
// config marks the layer MoE, else a dense SwiGLU MLP.
std::unique_ptr<FfnBlock> ffn_block(const LayerSite& site);

// Builds this rank's slice of the decoder of the config's family. Layers at or past
// num_hidden_layers (DeepSeek's and GLM's next-token-prediction layers) are never named, so
// never read.
DecoderParts build_decoder(const ModelConfig& c, TpSlice tp, WeightLoader& loader);

}  // namespace e3::model
