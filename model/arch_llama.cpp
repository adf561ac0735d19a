// Llama, Mistral, Qwen2, Qwen3 and Qwen3-MoE: GQA attention and a SwiGLU MLP or (Qwen3-MoE)
// routed experts. The families differ in their config classes' keys and defaults (biases,
// q/k norm, sliding window, head_dim, which layers are MoE).
#include <algorithm>

#include <nlohmann/json.hpp>

#include "model/arch.h"

namespace e3::model {
namespace {

using nlohmann::json;

// Qwen's sliding window: only with use_sliding_window, from layer max_window_layers on.
void parse_qwen_sliding(const json& doc, const ConfigKeys& k, ModelConfig& c) {
  if (!k.boolean_or("use_sliding_window", false)) return;
  const int64_t size = doc.contains("sliding_window") ? k.integer_or("sliding_window", 0) : 4096;
  parse_sliding_window(doc, k, size, k.integer_or("max_window_layers", 28), c);
}

void parse_llama(const json&, const ConfigKeys& k, ModelConfig& c) {
  c.qkv_bias = c.o_bias = k.boolean_or("attention_bias", false);
  c.mlp_bias = k.boolean_or("mlp_bias", false);
}

void parse_mistral(const json& doc, const ConfigKeys& k, ModelConfig& c) {
  // HF's MistralConfig defaults sliding_window to 4096 when the key is absent; null disables it.
  const int64_t size = doc.contains("sliding_window") ? k.integer_or("sliding_window", 0) : 4096;
  parse_sliding_window(doc, k, size, 0, c);
}

void parse_qwen2(const json& doc, const ConfigKeys& k, ModelConfig& c) {
  c.qkv_bias = true;
  parse_qwen_sliding(doc, k, c);
}

void parse_qwen3(const json& doc, const ConfigKeys& k, ModelConfig& c) {
  c.qkv_bias = c.o_bias = k.boolean_or("attention_bias", false);
  c.qk_norm = true;
  parse_qwen_sliding(doc, k, c);
}

void parse_qwen3_moe(const json& doc, const ConfigKeys& k, ModelConfig& c) {
  parse_qwen3(doc, k, c);
  MoeConfig& m = c.moe;
  m.num_experts = k.size_or("num_experts", 128, kMaxExperts);
  m.experts_per_token = k.size_or("num_experts_per_tok", 8, kMaxExperts);
  m.moe_intermediate_size = k.size_or("moe_intermediate_size", 768, kMaxIntermediate);
  m.norm_topk_prob = k.boolean_or("norm_topk_prob", false);
  m.scoring = Scoring::Softmax;
  m.topk_method = TopkMethod::Greedy;
  const int64_t step = k.integer_or("decoder_sparse_step", 1);
  E3_REQUIRE(step > 0, ErrorKind::Model, "{}: decoder_sparse_step must be positive", k.where());
  std::vector<int64_t> dense_only;
  if (doc.contains("mlp_only_layers") && doc["mlp_only_layers"].is_array())
    for (const json& v : doc["mlp_only_layers"]) {
      E3_REQUIRE(v.is_number_integer(), ErrorKind::Model, "{}: 'mlp_only_layers' holds {}, not a layer index",
                 k.where(), json_excerpt(v));
      dense_only.push_back(v.get<int64_t>());
    }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    m.layer_is_moe[static_cast<size_t>(l)] = std::find(dense_only.begin(), dense_only.end(), l) == dense_only.end() &&
                                             m.num_experts > 0 && (l + 1) % step == 0;
  check_moe(k, m);
}

}  // namespace

std::vector<ArchDescriptor> arch_llama_families() {
  return {
      {.family = "llama", .architectures = {"LlamaForCausalLM"}, .model_types = {"llama"}, .parse = parse_llama},
      {.family = "mistral", .architectures = {"MistralForCausalLM"}, .model_types = {"mistral"},
       .parse = parse_mistral},
      {.family = "qwen2", .architectures = {"Qwen2ForCausalLM"}, .model_types = {"qwen2"}, .parse = parse_qwen2},
      // Qwen3's config class defaults head_dim to 128 rather than deriving it.
      {.family = "qwen3", .architectures = {"Qwen3ForCausalLM"}, .model_types = {"qwen3"},
       .defaults = {.head_dim = 128}, .parse = parse_qwen3},
      {.family = "qwen3_moe", .architectures = {"Qwen3MoeForCausalLM"}, .model_types = {"qwen3_moe"},
       .parse = parse_qwen3_moe, .experts_key = "num_experts"},
  };
}

}  // namespace e3::model
