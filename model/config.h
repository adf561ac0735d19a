// config.json -> a typed, validated ModelConfig.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/error.h"
#include "core/json_read.h"
#include "model/router.h"

namespace e3::model {

// An architecture family (model/arch.h): its names, config defaults and the pieces it is built of.
struct ArchDescriptor;
// The family's short name ("llama", "glm4_moe"), "?" for none.
const char* family_name(const ArchDescriptor* family);

// The attention variant of a family's layers; kept in ModelConfig too, so that the checks on a
// config (tensor parallelism, sizes, `info`) need not reach the registry.
enum class AttentionKind { Gqa, Mla };

// RoPE as the checkpoint declares it, after HF's standardisation of rope_scaling /
// rope_parameters / rope_theta.
struct RopeConfig {
  std::string type = "default";  // default | linear | llama3 | yarn
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;
  double factor = 1.0;                       // linear, llama3, yarn
  double low_freq_factor = 1.0;              // llama3
  double high_freq_factor = 4.0;             // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn
  std::optional<double> attention_factor;    // yarn
  std::optional<double> mscale;              // yarn
  std::optional<double> mscale_all_dim;      // yarn
  double beta_fast = 32.0;                   // yarn
  double beta_slow = 1.0;                    // yarn
  bool truncate = true;                      // yarn
};

// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2).
struct MlaConfig {
  int64_t q_lora_rank = 0;  // 0: a plain q_proj (DeepSeek-V2-Lite style)
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = true;  // RoPE pairs are (2i, 2i+1)
  bool attention_bias = false;  // on q_a_proj, kv_a_proj_with_mqa and o_proj
  double softmax_scale = 0;     // qk_head_dim^-0.5, times mscale^2 under YaRN with mscale_all_dim
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// Mixture of experts: which layers, the router, the experts.
struct MoeConfig {
  int64_t num_experts = 0;             // routed experts; 0: no MoE
  int64_t experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  int64_t n_shared_experts = 0;        // a shared MLP of moe_intermediate_size * n_shared_experts
  Scoring scoring = Scoring::Softmax;             // names: kScoringNames
  TopkMethod topk_method = TopkMethod::Greedy;    // names: kTopkMethodNames
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  std::vector<bool> layer_is_moe;      // per layer
  bool has_correction_bias() const { return topk_method == TopkMethod::NoAuxTc; }
};

// How a checkpoint's linear weights are quantized (quantization_config). Which tensors are
// quantized follows the checkpoint's contents; this says how to read those that are.
struct QuantConfig {
  enum class Method { None, Fp8Block, Int4Pack };
  Method method = Method::None;
  int64_t block_rows = 128, block_cols = 128;  // fp8: weight_block_size
  int64_t group_size = 32;                      // int4: the group of columns sharing a scale
  std::string describe() const;                 // for the startup line and errors
};

struct ModelConfig {
  std::filesystem::path source;   // the config.json it came from
  std::string architecture;       // architectures[0], or "" when absent
  std::string model_type;
  const ArchDescriptor* family = nullptr;  // set by the parser from the registry
  AttentionKind attention = AttentionKind::Gqa;

  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::string torch_dtype = "bfloat16";

  bool qkv_bias = false;   // bias on q/k/v projections
  bool o_bias = false;     // bias on the output projection
  bool mlp_bias = false;   // bias on gate/up/down
  bool qk_norm = false;    // per-head RMSNorm of q and k before RoPE (Qwen3, GLM-4.5's use_qk_norm)
  // Per layer: 0 for full causal attention, else the sliding window.
  std::vector<int64_t> sliding_window;

  RopeConfig rope;
  MlaConfig mla;  // MLA families only
  MoeConfig moe;  // MoE families
  QuantConfig quant;
  // Tensor names are prefixed with this (Kimi-K2.5 keeps its text model under language_model.).
  std::string tensor_prefix;
  std::string fingerprint;  // FNV-1a of config.json's bytes
  bool is_mla() const { return attention == AttentionKind::Mla; }
};

// Reads and validates DIR/config.json. Errors name the file and the key.
ModelConfig load_model_config(const std::filesystem::path& model_dir);
// The same from a config file by its own path (the benchmark's shapes).
ModelConfig load_model_config_file(const std::filesystem::path& path);
// The same from an already parsed document; `source` is used in error messages.
ModelConfig parse_model_config(const nlohmann::json& doc, const std::filesystem::path& source);

// Checks that the model splits over `tp` ranks; throws a model error naming the dimension.
void check_tensor_parallel(const ModelConfig& c, int tp);

// EAGLE-3's default capture ids: [2, L/2, L-3].
std::vector<int> default_capture_ids(const ModelConfig& c);

}  // namespace e3::model
