// DeepSeek-V2, DeepSeek-V3 and Kimi-K2: multi-head latent attention in every layer; the first
// first_k_dense_replace layers have a dense SwiGLU MLP, the rest routed experts plus shared
// experts.
#include "model/arch.h"

namespace e3::model {
namespace {

using nlohmann::json;

// DeepseekV2Config's MoE: softmax scores, greedy top-k, every layer MoE.
constexpr GroupedMoeDefaults kDeepseekV2Moe{.num_experts = 64, .moe_intermediate_size = 1407, .n_shared_experts = 2};

// DeepseekV3Config's MoE: sigmoid scores with a correction bias, three dense layers first.
constexpr GroupedMoeDefaults kDeepseekV3Moe{.num_experts = 256,
                                            .moe_intermediate_size = 2048,
                                            .n_shared_experts = 1,
                                            .scoring = Scoring::Sigmoid,
                                            .topk_method = TopkMethod::NoAuxTc,
                                            .norm_topk_prob = true,
                                            .routed_scaling_factor = 2.5,
                                            .first_k_dense_replace = 3};

void parse_deepseek_v2(const json&, const ConfigKeys& k, ModelConfig& c) {
  // DeepSeek-V2 always pairs (2i, 2i+1): a complex product.
  parse_mla(k, /*read_rope_interleave=*/false, c);
  parse_grouped_moe(k, kDeepseekV2Moe, c);
}

void parse_deepseek_v3(const json&, const ConfigKeys& k, ModelConfig& c) {
  parse_mla(k, /*read_rope_interleave=*/true, c);
  parse_grouped_moe(k, kDeepseekV3Moe, c);
}

}  // namespace

std::vector<ArchDescriptor> arch_deepseek_families() {
  return {
      {.family = "deepseek_v2", .architectures = {"DeepseekV2ForCausalLM"}, .model_types = {"deepseek_v2"},
       .attention = AttentionKind::Mla, .parse = parse_deepseek_v2},
      {.family = "deepseek_v3", .architectures = {"DeepseekV3ForCausalLM"}, .model_types = {"deepseek_v3", "kimi_k2"},
       .attention = AttentionKind::Mla, .parse = parse_deepseek_v3},
  };
}

}  // namespace e3::model
