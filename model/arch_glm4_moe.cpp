// GLM-4.5, GLM-4.6 and GLM-4.5-Air (Glm4MoeForCausalLM): GQA attention with q/k/v bias (none on
// o_proj), optional per-head q/k RMSNorm, and RoPE on the first head_dim * partial_rotary_factor
// columns of each head, rotate-half, the rest passed through; DeepSeek-V3's MoE (sigmoid scores,
// correction bias, grouped top-k, shared experts, dense first layers). The next-token-prediction
// layers stored after the last decoder layer are not part of the decoder and are never read.
#include <nlohmann/json.hpp>

#include "model/arch.h"

namespace e3::model {
namespace {

using nlohmann::json;

bool has_value(const json& obj, const char* key) { return obj.is_object() && obj.contains(key) && !obj[key].is_null(); }

void parse_glm4_moe(const json& doc, const ConfigKeys& k, ModelConfig& c) {
  // Glm4MoeConfig's defaults where config.json is silent.
  if (!k.has("rms_norm_eps")) c.rms_norm_eps = 1e-5;
  if (!k.has("max_position_embeddings")) c.max_position_embeddings = 131072;
  const bool rotary_given = has_value(doc, "partial_rotary_factor") ||
                            (doc.contains("rope_scaling") && has_value(doc["rope_scaling"], "partial_rotary_factor")) ||
                            (doc.contains("rope_parameters") && has_value(doc["rope_parameters"], "partial_rotary_factor"));
  if (!rotary_given) c.rope.partial_rotary_factor = 0.5;

  c.qkv_bias = k.boolean_or("attention_bias", false);
  c.qk_norm = k.boolean_or("use_qk_norm", false);

  GroupedMoeDefaults d;
  d.num_experts = 128;
  d.experts_per_token = 8;
  d.moe_intermediate_size = 1408;
  d.n_shared_experts = 1;
  // The router is DeepSeek-V3's whatever config.json says: HF reads no scoring_func or topk_method.
  d.scoring = Scoring::Sigmoid;
  d.topk_method = TopkMethod::NoAuxTc;
  d.router_keys = false;
  d.norm_topk_prob = true;
  d.routed_scaling_factor = 1.0;
  d.first_k_dense_replace = 1;
  d.moe_layer_freq = false;
  parse_grouped_moe(k, d, c);
}

}  // namespace

const ArchDescriptor& glm4_moe_arch() {
  static const ArchDescriptor d = shared_pieces_family("glm4_moe", {"Glm4MoeForCausalLM"}, {"glm4_moe"},
                                                       AttentionKind::Gqa, parse_glm4_moe);
  return d;
}

}  // namespace e3::model
