#include "model/config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/error.h"
#include "kernels/hash.h"

namespace e3::model {
namespace {

using nlohmann::json;

// Typed access to one JSON object with errors that name the file and the key.
class Keys {
 public:
  Keys(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

  int64_t integer(const char* key) const {
    E3_REQUIRE(has(key), ErrorKind::Model, "{}: required key '{}' is missing", where_, key);
    return integer_or(key, 0);
  }
  int64_t integer_or(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    E3_REQUIRE(v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())),
               ErrorKind::Model, "{}: '{}' must be an integer, got {}", where_, key, v.dump());
    return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
  }
  int64_t positive(const char* key) const {
    const int64_t v = integer(key);
    E3_REQUIRE(v > 0, ErrorKind::Model, "{}: '{}' must be positive, got {}", where_, key, v);
    return v;
  }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    E3_REQUIRE(v.is_number(), ErrorKind::Model, "{}: '{}' must be a number, got {}", where_, key, v.dump());
    return v.get<double>();
  }
  std::optional<double> optional_number(const char* key) const {
    if (!has(key)) return std::nullopt;
    return number_or(key, 0.0);
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    E3_REQUIRE(v.is_boolean(), ErrorKind::Model, "{}: '{}' must be true or false, got {}", where_, key, v.dump());
    return v.get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    E3_REQUIRE(v.is_string(), ErrorKind::Model, "{}: '{}' must be a string, got {}", where_, key, v.dump());
    return v.get<std::string>();
  }
  const std::string& where() const { return where_; }

 private:
  const json& obj_;
  std::string where_;
};

Family detect_family(const std::string& arch, const std::string& model_type, const std::string& where) {
  if (arch == "LlamaForCausalLM" || (arch.empty() && model_type == "llama")) return Family::Llama;
  if (arch == "MistralForCausalLM" || (arch.empty() && model_type == "mistral")) return Family::Mistral;
  if (arch == "Qwen2ForCausalLM" || (arch.empty() && model_type == "qwen2")) return Family::Qwen2;
  if (arch == "Qwen3ForCausalLM" || (arch.empty() && model_type == "qwen3")) return Family::Qwen3;
  // An unrecognised architecture name with a known model_type is still that family.
  if (model_type == "llama") return Family::Llama;
  if (model_type == "mistral") return Family::Mistral;
  if (model_type == "qwen2") return Family::Qwen2;
  if (model_type == "qwen3") return Family::Qwen3;
  E3_THROW(ErrorKind::Model,
           "{}: unsupported architecture '{}' (model_type '{}'); supported: llama, mistral, qwen2, qwen3",
           where, arch, model_type);
}

RopeConfig parse_rope(const json& doc, const Keys& top, int64_t max_pos) {
  // HF's priority: a truthy rope_scaling, else rope_parameters; theta from inside, else top level.
  const json empty = json::object();
  const json* params = &empty;
  if (doc.contains("rope_scaling") && doc["rope_scaling"].is_object() && !doc["rope_scaling"].empty())
    params = &doc["rope_scaling"];
  else if (doc.contains("rope_parameters") && doc["rope_parameters"].is_object())
    params = &doc["rope_parameters"];
  const Keys rp(*params, top.where() + " rope parameters");

  RopeConfig r;
  r.theta = rp.has("rope_theta") ? rp.number_or("rope_theta", 0) : top.number_or("rope_theta", 10000.0);
  r.partial_rotary_factor = rp.has("partial_rotary_factor") ? rp.number_or("partial_rotary_factor", 1.0)
                                                            : top.number_or("partial_rotary_factor", 1.0);
  r.type = rp.string_or("rope_type", rp.string_or("type", "default"));
  E3_REQUIRE(r.theta > 0, ErrorKind::Model, "{}: rope_theta must be positive", top.where());
  if (r.type == "default") return r;

  if (r.type == "linear") {
    r.factor = rp.number_or("factor", 0);
    E3_REQUIRE(r.factor > 0, ErrorKind::Model, "{}: linear RoPE needs a positive 'factor'", rp.where());
    return r;
  }
  E3_REQUIRE(r.type == "llama3" || r.type == "yarn", ErrorKind::Model,
             "{}: RoPE type '{}' is not supported (supported: default, linear, llama3, yarn)", rp.where(),
             r.type);
  // As HF: a top-level original_max_position_embeddings wins, then the one in the dict, then
  // max_position_embeddings.
  r.original_max_position_embeddings =
      top.has("original_max_position_embeddings") ? top.integer("original_max_position_embeddings")
                                                  : rp.integer_or("original_max_position_embeddings", max_pos);
  E3_REQUIRE(r.original_max_position_embeddings > 0, ErrorKind::Model,
             "{}: original_max_position_embeddings must be positive", rp.where());
  if (r.type == "llama3") {
    r.factor = rp.number_or("factor", 0);
    r.low_freq_factor = rp.number_or("low_freq_factor", 0);
    r.high_freq_factor = rp.number_or("high_freq_factor", 0);
    E3_REQUIRE(r.factor > 0 && r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor,
               ErrorKind::Model, "{}: llama3 RoPE needs factor > 0 and high_freq_factor > low_freq_factor > 0",
               rp.where());
    return r;
  }
  // yarn
  r.factor = rp.has("factor") ? rp.number_or("factor", 0)
                              : static_cast<double>(max_pos) / static_cast<double>(r.original_max_position_embeddings);
  E3_REQUIRE(r.factor > 0, ErrorKind::Model, "{}: yarn RoPE needs a positive 'factor'", rp.where());
  r.attention_factor = rp.optional_number("attention_factor");
  r.mscale = rp.optional_number("mscale");
  r.mscale_all_dim = rp.optional_number("mscale_all_dim");
  // HF uses `or`, so 0 falls back to the default too.
  r.beta_fast = rp.number_or("beta_fast", 0);
  if (r.beta_fast == 0) r.beta_fast = 32.0;
  r.beta_slow = rp.number_or("beta_slow", 0);
  if (r.beta_slow == 0) r.beta_slow = 1.0;
  r.truncate = rp.boolean_or("truncate", true);
  return r;
}

std::vector<int64_t> parse_sliding(const json& doc, const Keys& k, Family family, int64_t layers) {
  std::vector<int64_t> window(static_cast<size_t>(layers), 0);
  int64_t size = 0;
  std::vector<bool> sliding(static_cast<size_t>(layers), false);
  if (family == Family::Mistral) {
    // HF's MistralConfig defaults sliding_window to 4096 when the key is absent; null disables it.
    size = doc.contains("sliding_window") ? k.integer_or("sliding_window", 0) : 4096;
    sliding.assign(sliding.size(), size > 0);
  } else if (family == Family::Qwen2 || family == Family::Qwen3) {
    if (k.boolean_or("use_sliding_window", false)) {
      size = doc.contains("sliding_window") ? k.integer_or("sliding_window", 0) : 4096;
      const int64_t first = k.integer_or("max_window_layers", 28);
      for (int64_t i = 0; i < layers; ++i) sliding[static_cast<size_t>(i)] = size > 0 && i >= first;
    }
  }
  if (doc.contains("layer_types") && doc["layer_types"].is_array() && size > 0) {
    const json& types = doc["layer_types"];
    E3_REQUIRE(static_cast<int64_t>(types.size()) == layers, ErrorKind::Model,
               "{}: layer_types has {} entries for {} layers", k.where(), types.size(), layers);
    for (int64_t i = 0; i < layers; ++i)
      sliding[static_cast<size_t>(i)] = types[static_cast<size_t>(i)] == "sliding_attention";
  }
  for (int64_t i = 0; i < layers; ++i)
    if (sliding[static_cast<size_t>(i)]) window[static_cast<size_t>(i)] = size;
  return window;
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::Llama: return "llama";
    case Family::Mistral: return "mistral";
    case Family::Qwen2: return "qwen2";
    case Family::Qwen3: return "qwen3";
  }
  return "?";
}

ModelConfig parse_model_config(const json& doc, const std::filesystem::path& source) {
  const std::string where = source.string();
  E3_REQUIRE(doc.is_object(), ErrorKind::Model, "{}: not a JSON object", where);
  const Keys k(doc, where);
  ModelConfig c;
  c.source = source;
  if (doc.contains("architectures") && doc["architectures"].is_array() && !doc["architectures"].empty() &&
      doc["architectures"][0].is_string())
    c.architecture = doc["architectures"][0].get<std::string>();
  c.model_type = k.string_or("model_type", "");
  c.family = detect_family(c.architecture, c.model_type, where);

  c.hidden_size = k.positive("hidden_size");
  c.intermediate_size = k.positive("intermediate_size");
  c.num_hidden_layers = k.positive("num_hidden_layers");
  c.num_attention_heads = k.positive("num_attention_heads");
  c.num_key_value_heads = k.integer_or("num_key_value_heads", c.num_attention_heads);
  c.vocab_size = k.positive("vocab_size");
  c.max_position_embeddings = k.integer_or("max_position_embeddings", 4096);
  c.rms_norm_eps = k.number_or("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = k.boolean_or("tie_word_embeddings", false);
  c.torch_dtype = k.string_or("torch_dtype", k.string_or("dtype", "bfloat16"));
  const std::string act = k.string_or("hidden_act", "silu");
  E3_REQUIRE(act == "silu" || act == "swish", ErrorKind::Model,
             "{}: hidden_act '{}' is not supported (only silu)", where, act);

  // Qwen3's config class defaults head_dim to 128; the others derive it.
  const int64_t derived = c.hidden_size / c.num_attention_heads;
  c.head_dim = k.integer_or("head_dim", c.family == Family::Qwen3 ? 128 : derived);
  E3_REQUIRE(c.head_dim > 0 && c.num_key_value_heads > 0, ErrorKind::Model,
             "{}: head_dim and num_key_value_heads must be positive", where);
  E3_REQUIRE(c.num_attention_heads % c.num_key_value_heads == 0, ErrorKind::Model,
             "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where,
             c.num_attention_heads, c.num_key_value_heads);

  switch (c.family) {
    case Family::Llama:
      c.qkv_bias = c.o_bias = k.boolean_or("attention_bias", false);
      c.mlp_bias = k.boolean_or("mlp_bias", false);
      break;
    case Family::Mistral:
      break;
    case Family::Qwen2:
      c.qkv_bias = true;
      break;
    case Family::Qwen3:
      c.qkv_bias = c.o_bias = k.boolean_or("attention_bias", false);
      c.qk_norm = true;
      break;
  }
  c.sliding_window = parse_sliding(doc, k, c.family, c.num_hidden_layers);
  c.rope = parse_rope(doc, k, c.max_position_embeddings);
  E3_REQUIRE(c.rope.partial_rotary_factor > 0 && c.rope.partial_rotary_factor <= 1.0, ErrorKind::Model,
             "{}: partial_rotary_factor must be in (0, 1]", where);
  c.fingerprint = Fnv1a().update(doc.dump()).hex();
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  std::ifstream in(path);
  E3_REQUIRE(in.good(), ErrorKind::Model, "cannot read {} (is --model a HuggingFace checkpoint directory?)",
             path.string());
  std::stringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = json::parse(text.str());
  } catch (const json::parse_error& e) {
    E3_THROW(ErrorKind::Model, "{}: invalid JSON: {}", path.string(), e.what());
  }
  return parse_model_config(doc, path);
}

void check_tensor_parallel(const ModelConfig& c, int tp) {
  const std::string where = c.source.string();
  E3_REQUIRE(c.num_attention_heads % tp == 0, ErrorKind::Model,
             "{}: num_attention_heads {} is not divisible by --tp {}", where, c.num_attention_heads, tp);
  E3_REQUIRE(c.num_key_value_heads % tp == 0 || tp % c.num_key_value_heads == 0, ErrorKind::Model,
             "{}: num_key_value_heads {} neither divides nor is divisible by --tp {}", where,
             c.num_key_value_heads, tp);
  E3_REQUIRE(c.intermediate_size % tp == 0, ErrorKind::Model,
             "{}: intermediate_size {} is not divisible by --tp {}", where, c.intermediate_size, tp);
}

std::vector<int> default_capture_ids(const ModelConfig& c) {
  const int L = static_cast<int>(c.num_hidden_layers);
  E3_REQUIRE(L >= 4, ErrorKind::Usage,
             "the model has {} layers, too few for the default capture ids [2, L/2, L-3]; pass --layers", L);
  return {2, L / 2, L - 3};
}

}  // namespace e3::model
