// DeepSeek-V2, DeepSeek-V3 and Kimi-K2: multi-head latent attention in every layer; the first
// first_k_dense_replace layers have a dense SwiGLU MLP, the rest routed experts plus shared
// experts.
#include "model/arch.h"

namespace e3::model {
namespace {

using nlohmann::json;

void parse_deepseek_v2(const json&, const ConfigKeys& k, ModelConfig& c) {
  // DeepSeek-V2 always pairs (2i, 2i+1): a complex product.
  parse_mla(k, /*read_rope_interleave=*/false, c);
  GroupedMoeDefaults d;
  d.num_experts = 64;
  d.moe_intermediate_size = 1407;
  d.n_shared_experts = 2;
  d.scoring = Scoring::Softmax;
  d.topk_method = TopkMethod::Greedy;
  d.norm_topk_prob = false;
  d.routed_scaling_factor = 1.0;
  d.first_k_dense_replace = 0;
  parse_grouped_moe(k, d, c);
}

void parse_deepseek_v3(const json&, const ConfigKeys& k, ModelConfig& c) {
  parse_mla(k, /*read_rope_interleave=*/true, c);
  GroupedMoeDefaults d;
  d.num_experts = 256;
  d.moe_intermediate_size = 2048;
  d.n_shared_experts = 1;
  d.scoring = Scoring::Sigmoid;
  d.topk_method = TopkMethod::NoAuxTc;
  d.norm_topk_prob = true;
  d.routed_scaling_factor = 2.5;
  d.first_k_dense_replace = 3;
  parse_grouped_moe(k, d, c);
}

}  // namespace

const ArchDescriptor& deepseek_v2_arch() {
  static const ArchDescriptor d =
      shared_pieces_family("deepseek_v2", {"DeepseekV2ForCausalLM"}, {"deepseek_v2"}, AttentionKind::Mla,
                           parse_deepseek_v2);
  return d;
}

const ArchDescriptor& deepseek_v3_arch() {
  static const ArchDescriptor d =
      shared_pieces_family("deepseek_v3", {"DeepseekV3ForCausalLM"}, {"deepseek_v3", "kimi_k2"}, AttentionKind::Mla,
                           parse_deepseek_v3);
  return d;
}

}  // namespace e3::model
