// config.json -> a typed, validated ModelConfig.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace e3::model {

enum class Family { Llama, Mistral, Qwen2, Qwen3 };
const char* family_name(Family f);

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

struct ModelConfig {
  std::filesystem::path source;   // the config.json it came from
  std::string architecture;       // architectures[0], or "" when absent
  std::string model_type;
  Family family = Family::Llama;

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
  bool qk_norm = false;    // per-head RMSNorm of q and k before RoPE (Qwen3)
  // Per layer: 0 for full causal attention, else the sliding window.
  std::vector<int64_t> sliding_window;

  RopeConfig rope;
  std::string fingerprint;  // FNV-1a of config.json's bytes
};

// Reads and validates DIR/config.json. Errors name the file and the key.
ModelConfig load_model_config(const std::filesystem::path& model_dir);
// The same from an already parsed document; `source` is used in error messages.
ModelConfig parse_model_config(const nlohmann::json& doc, const std::filesystem::path& source);

// Checks that the model splits over `tp` ranks; throws a model error naming the dimension.
void check_tensor_parallel(const ModelConfig& c, int tp);

// EAGLE-3's default capture ids: [2, L/2, L-3].
std::vector<int> default_capture_ids(const ModelConfig& c);

}  // namespace e3::model
