// One descriptor per architecture family, each family file listing its own (arch_<file>.cpp)
// and the registry listing the files (arch_registry.cpp). A descriptor says which HF names
// select the family, how its config.json is read (the defaults of its config class for the
// keys every family reads, then its own keys), its tensor names, and which shared pieces it is
// built of: an attention variant (GQA, MLA), from which the decoder builder picks the block,
// and the FFN the config describes (dense, or routed experts under one of the router kinds).
// Adding a family that needs no new kernel is one descriptor (a new arch_<file>.cpp also takes
// its line in the registry), a golden case and the README's model table. This is config
// parsing only: nothing here reaches the weights or the backend.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/config.h"
#include "model/config_keys.h"
#include "model/tensor_names.h"

namespace e3::model {

// Where a family's config class defaults the keys every family reads otherwise than HF's
// common defaults (given here). The common parser reads those keys once, with one precedence.
struct CommonDefaults {
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 4096;
  int64_t head_dim = 0;                // 0: hidden_size / num_attention_heads
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;  // RoPE on the first head_dim * factor columns of each head
};

// Reads a family's own keys into `c`. The common keys (sizes, eps, head_dim, rope) are already
// set; sliding_window and moe.layer_is_moe are sized and all off.
using ConfigParser = void (*)(const nlohmann::json& doc, const ConfigKeys& keys, ModelConfig& c);

struct ArchDescriptor {
  const char* family = "";                      // short name, in messages and `info`
  std::vector<std::string_view> architectures;  // config.json's architectures[0]
  std::vector<std::string_view> model_types;    // model_type, when the architecture is unknown
  AttentionKind attention = AttentionKind::Gqa;
  CommonDefaults defaults = {};
  ConfigParser parse = nullptr;
  const TensorNames* names = &kHfTensorNames;
  const char* experts_key = "n_routed_experts";  // the key counting routed experts, for messages
};

// Every supported family, in the order messages list them.
std::span<const ArchDescriptor> arch_registry();
// The family of architectures[0], else of model_type; null when neither is known.
const ArchDescriptor* find_arch(std::string_view architecture, std::string_view model_type);
// "llama, mistral, ...": the supported model_types, for messages.
std::string supported_model_types();

// Config pieces that families combine (config_parts.cpp).

// Sliding-window attention: `size` tokens on layers from `first_layer` on (0: none), then
// config.json's layer_types where it has them.
void parse_sliding_window(const nlohmann::json& doc, const ConfigKeys& k, int64_t size, int64_t first_layer,
                          ModelConfig& c);

// Multi-head latent attention's shapes and softmax scale; sets head_dim to the rotary dimension,
// as HF does. RoPE pairs (2i, 2i+1) unless `read_rope_interleave` and rope_interleave is false.
void parse_mla(const ConfigKeys& k, bool read_rope_interleave, ModelConfig& c);

// Defaults of a DeepSeek-style MoE (routed plus shared experts, dense first layers).
struct GroupedMoeDefaults {
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  int64_t n_shared_experts = 0;
  Scoring scoring = Scoring::Softmax;
  TopkMethod topk_method = TopkMethod::Greedy;
  bool router_keys = true;      // scoring_func / topk_method read from config.json
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  int64_t first_k_dense_replace = 0;
  bool moe_layer_freq = true;   // moe_layer_freq read from config.json
};
// n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts, the router
// keys, first_k_dense_replace: layer l is MoE from first_k_dense_replace on.
void parse_grouped_moe(const ConfigKeys& k, const GroupedMoeDefaults& d, ModelConfig& c);
// The checks every MoE config passes (experts per token, groups).
void check_moe(const ConfigKeys& k, const MoeConfig& m);

}  // namespace e3::model
