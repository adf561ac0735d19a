// The decoder-only transformer loop shared by every architecture: embedding, layers of
// (norm, attention, all-reduce, residual add, norm, FFN, all-reduce, residual add), final
// norm, with capture points between layers. Architectures only say which blocks to build.
#pragma once

#include <memory>
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

// The Llama family (llama, mistral, qwen2, qwen3, qwen3_moe): arch_llama.cpp.
DecoderParts build_llama_family(const ModelConfig& c, TpSlice tp, WeightLoader& loader);
// DeepSeek-V2/V3 and Kimi-K2 (MLA + MoE): arch_deepseek.cpp.
DecoderParts build_deepseek(const ModelConfig& c, TpSlice tp, WeightLoader& loader);
// The router settings of a config's MoE layers.
kernels::RouterParams router_params(const MoeConfig& moe);

}  // namespace e3::model
