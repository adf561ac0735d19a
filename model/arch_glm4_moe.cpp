// GLM-4.5, GLM-4.6 and GLM-4.5-Air (Glm4MoeForCausalLM): GQA attention with q/k/v bias (none on
// o_proj), optional per-head q/k RMSNorm, and RoPE on the first head_dim * partial_rotary_factor
// columns of each head, rotate-half, the rest passed through; DeepSeek-V3's MoE (sigmoid scores,
// correction bias, grouped top-k, shared experts, dense first layers). The next-token-prediction
// layers stored after the last decoder layer are not part of the decoder and are never read.
#include "model/arch.h"

namespace e3::model {
namespace {

using nlohmann::json;

// Glm4MoeConfig's MoE. The router is DeepSeek-V3's whatever config.json says: HF reads no
// scoring_func, topk_method or moe_layer_freq.
constexpr GroupedMoeDefaults kGlm4Moe{.num_experts = 128,
                                      .experts_per_token = 8,
                                      .moe_intermediate_size = 1408,
                                      .n_shared_experts = 1,
                                      .scoring = Scoring::Sigmoid,
                                      .topk_method = TopkMethod::NoAuxTc,
                                      .router_keys = false,
                                      .norm_topk_prob = true,
                                      .routed_scaling_factor = 1.0,
                                      .first_k_dense_replace = 1,
                                      .moe_layer_freq = false};

void parse_glm4_moe(const json&, const ConfigKeys& k, ModelConfig& c) {
  c.qkv_bias = k.boolean_or("attention_bias", false);
  c.qk_norm = k.boolean_or("use_qk_norm", false);
  parse_grouped_moe(k, kGlm4Moe, c);
}

}  // namespace

std::vector<ArchDescriptor> arch_glm4_moe_families() {
  // Glm4MoeConfig's defaults where config.json is silent.
  return {{.family = "glm4_moe",
           .architectures = {"Glm4MoeForCausalLM"},
           .model_types = {"glm4_moe"},
           .defaults = {.rms_norm_eps = 1e-5, .max_position_embeddings = 131072, .partial_rotary_factor = 0.5},
           .parse = parse_glm4_moe}};
}

}  // namespace e3::model
