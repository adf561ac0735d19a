#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "core/json_read.h"
#include "model/arch.h"
#include "model/config_keys.h"

namespace e3::model {
namespace {

using nlohmann::json;

// The one reading of the rope keys. HF's priority: a truthy rope_scaling, else
// rope_parameters; rope_theta and partial_rotary_factor from inside it, else the top level, else
// the family's defaults.
RopeConfig parse_rope(const json& doc, const ConfigKeys& top, int64_t max_pos, const CommonDefaults& d) {
  const json empty = json::object();
  const json* params = &empty;
  if (doc.contains("rope_scaling") && doc["rope_scaling"].is_object() && !doc["rope_scaling"].empty())
    params = &doc["rope_scaling"];
  else if (doc.contains("rope_parameters") && doc["rope_parameters"].is_object())
    params = &doc["rope_parameters"];
  const ConfigKeys rp(*params, top.where() + " rope parameters");

  RopeConfig r;
  r.theta = rp.has("rope_theta") ? rp.number_or("rope_theta", 0) : top.number_or("rope_theta", d.rope_theta);
  r.partial_rotary_factor = rp.has("partial_rotary_factor")
                                ? rp.number_or("partial_rotary_factor", 0)
                                : top.number_or("partial_rotary_factor", d.partial_rotary_factor);
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

}  // namespace

std::string QuantConfig::describe() const {
  switch (method) {
    case Method::None: return "none";
    case Method::Fp8Block: return fmt::format("fp8 e4m3, {}x{} blocks", block_rows, block_cols);
    case Method::Int4Pack: return fmt::format("int4 pack-quantized, symmetric, group {}", group_size);
  }
  return "?";
}

namespace {

QuantConfig parse_fp8(const json& q, const std::string& where) {
  QuantConfig c;
  c.method = QuantConfig::Method::Fp8Block;
  const ConfigKeys k(q, where + " quantization_config");
  const std::string fmt_name = k.string_or("fmt", "e4m3");
  E3_REQUIRE(fmt_name == "e4m3", ErrorKind::Model, "{} quantization_config: fp8 fmt '{}' is not supported (only e4m3)",
             where, fmt_name);
  E3_REQUIRE(q.contains("weight_block_size") && q["weight_block_size"].is_array() && q["weight_block_size"].size() == 2 &&
                 q["weight_block_size"][0].is_number_integer() && q["weight_block_size"][1].is_number_integer() &&
                 q["weight_block_size"][0].get<int64_t>() > 0 && q["weight_block_size"][1].get<int64_t>() > 0,
             ErrorKind::Model,
             "{} quantization_config: fp8 needs weight_block_size [rows, cols] (block-scaled weights); per-tensor "
             "fp8 scales are not supported",
             where);
  c.block_rows = q["weight_block_size"][0].get<int64_t>();
  c.block_cols = q["weight_block_size"][1].get<int64_t>();
  return c;
}

QuantConfig parse_compressed_tensors(const json& q, const std::string& where) {
  const std::string at = where + " quantization_config";
  QuantConfig c;
  c.method = QuantConfig::Method::Int4Pack;
  const std::string format = ConfigKeys(q, at).string_or("format", "");
  E3_REQUIRE(format == "pack-quantized", ErrorKind::Model,
             "{}: compressed-tensors format '{}' is not supported (only pack-quantized int4)", at, format);
  E3_REQUIRE(q.contains("config_groups") && q["config_groups"].is_object() && !q["config_groups"].empty(),
             ErrorKind::Model, "{}: compressed-tensors without config_groups", at);
  bool first = true;
  for (const auto& [name, group] : q["config_groups"].items()) {
    const std::string g = at + " config_groups." + clip(name, 64);
    E3_REQUIRE(group.is_object() && group.contains("weights") && group["weights"].is_object(), ErrorKind::Model,
               "{}: no weights scheme", g);
    const json& w = group["weights"];
    const ConfigKeys k(w, g + ".weights");
    const int64_t bits = k.integer_or("num_bits", 0);
    E3_REQUIRE(bits == 4, ErrorKind::Model, "{}.weights: num_bits {} is not supported (only 4)", g, bits);
    const std::string type = k.string_or("type", "int");
    E3_REQUIRE(type == "int", ErrorKind::Model, "{}.weights: type '{}' is not supported (only int)", g, type);
    E3_REQUIRE(k.boolean_or("symmetric", false), ErrorKind::Model,
               "{}.weights: asymmetric int4 (zero points) is not supported; only symmetric", g);
    const std::string strategy = k.string_or("strategy", "");
    E3_REQUIRE(strategy == "group", ErrorKind::Model, "{}.weights: strategy '{}' is not supported (only group)", g,
               strategy);
    const int64_t group_size = k.integer_or("group_size", 0);
    E3_REQUIRE(group_size > 0, ErrorKind::Model, "{}.weights: group_size must be positive", g);
    E3_REQUIRE(!group.contains("input_activations") || group["input_activations"].is_null(), ErrorKind::Model,
               "{}: activation quantization (input_activations) is not supported; weights only (W4A16)", g);
    E3_REQUIRE(first || group_size == c.group_size, ErrorKind::Model,
               "{}: group_size {} differs from another group's {}", g, group_size, c.group_size);
    c.group_size = group_size;
    first = false;
  }
  return c;
}

// quantization_config of the text model, or of the wrapper around it.
QuantConfig parse_quant(const json& text, const json& whole, const std::string& where) {
  const json* q = nullptr;
  if (text.contains("quantization_config")) q = &text["quantization_config"];
  else if (whole.contains("quantization_config")) q = &whole["quantization_config"];
  if (!q || q->is_null()) return {};
  E3_REQUIRE(q->is_object(), ErrorKind::Model, "{}: quantization_config is not an object", where);
  const std::string method = ConfigKeys(*q, where + " quantization_config").string_or("quant_method", "");
  if (method == "fp8") return parse_fp8(*q, where);
  if (method == "compressed-tensors") return parse_compressed_tensors(*q, where);
  E3_THROW(ErrorKind::Model, "{}: quantization_config.quant_method '{}' is not supported (fp8 block-scaled or "
           "compressed-tensors pack-quantized int4)", where, method);
}

// About as many parameters as the loader will allocate (an upper bound: a layer counts both its
// dense MLP and its experts), in double so that it cannot overflow. Each size is bounded on its
// own; this bounds their products, which `info` and the loader form in 64-bit integers.
void check_total_size(const ModelConfig& c, const std::string& where) {
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const double H = d(c.hidden_size);
  double attention = H * d(c.head_dim) * d(2 * c.num_attention_heads + 2 * c.num_key_value_heads);
  if (c.is_mla()) {
    const MlaConfig& m = c.mla;
    const double heads = d(c.num_attention_heads);
    attention = H * d(m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) +
                d(std::max(m.q_lora_rank, c.hidden_size)) * heads * d(m.qk_head_dim()) +
                d(m.kv_lora_rank) * heads * d(m.qk_nope_head_dim + m.v_head_dim) + heads * d(m.v_head_dim) * H;
  }
  const double experts = 3 * H * d(c.moe.moe_intermediate_size) * d(c.moe.num_experts + c.moe.n_shared_experts) +
                         H * d(c.moe.num_experts);
  const double total = H * d(c.vocab_size) + d(c.num_hidden_layers) * (attention + 3 * H * d(c.intermediate_size) +
                                                                      experts);
  E3_REQUIRE(total <= kMaxParameters, ErrorKind::Model,
             "{}: num_hidden_layers {}, hidden_size {}, intermediate_size {}, vocab_size {}{} describe a model of about "
             "{:.2g} parameters, more than this tool accepts ({:.2g}): is config.json corrupt?",
             where, c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.vocab_size,
             c.moe.num_experts > 0 ? fmt::format(", {} experts of moe_intermediate_size {}", c.moe.num_experts,
                                                 c.moe.moe_intermediate_size)
                                   : std::string(),
             total, kMaxParameters);
}

ModelConfig parse_config(const json& whole, const std::filesystem::path& source) {
  std::string where = source.string();
  E3_REQUIRE(whole.is_object(), ErrorKind::Model, "{}: not a JSON object", where);
  ModelConfig c;
  c.source = source;
  if (whole.contains("architectures") && whole["architectures"].is_array() && !whole["architectures"].empty() &&
      whole["architectures"][0].is_string())
    c.architecture = whole["architectures"][0].get<std::string>();
  // A multimodal wrapper (Kimi-K2.5) keeps the text model's config in text_config and its
  // tensors under language_model.
  const json* text = &whole;
  if (!find_arch(c.architecture, "") && whole.contains("text_config") && whole["text_config"].is_object()) {
    text = &whole["text_config"];
    where += " text_config";
    c.tensor_prefix = "language_model.";
  }
  const json& doc = *text;
  const ConfigKeys k(doc, where);
  c.model_type = k.string_or("model_type", ConfigKeys(whole, where).string_or("model_type", ""));
  c.family = find_arch(text == &whole ? c.architecture : "", c.model_type);
  E3_REQUIRE(c.family != nullptr, ErrorKind::Model, "{}: unsupported architecture '{}' (model_type '{}'); supported: {}",
             where, clip(c.architecture), c.model_type, supported_model_types());
  c.attention = c.family->attention;
  const CommonDefaults& defaults = c.family->defaults;

  c.hidden_size = k.size("hidden_size", kMaxHidden);
  c.intermediate_size = k.size("intermediate_size", kMaxIntermediate);
  c.num_hidden_layers = k.size("num_hidden_layers", kMaxLayers);
  c.num_attention_heads = k.size("num_attention_heads", kMaxHeads);
  c.num_key_value_heads = k.size_or("num_key_value_heads", c.num_attention_heads, kMaxHeads);
  c.vocab_size = k.size("vocab_size", kMaxVocab);
  c.max_position_embeddings = k.integer_or("max_position_embeddings", defaults.max_position_embeddings);
  c.rms_norm_eps = k.number_or("rms_norm_eps", defaults.rms_norm_eps);
  c.tie_word_embeddings = k.boolean_or("tie_word_embeddings", false);
  c.torch_dtype = k.string_or("torch_dtype", k.string_or("dtype", "bfloat16"));
  const std::string act = k.string_or("hidden_act", "silu");
  E3_REQUIRE(act == "silu" || act == "swish", ErrorKind::Model,
             "{}: hidden_act '{}' is not supported (only silu)", where, act);
  c.head_dim = k.size_or("head_dim", defaults.head_dim > 0 ? defaults.head_dim : c.hidden_size / c.num_attention_heads,
                         kMaxHeadDim);
  c.rope = parse_rope(doc, k, c.max_position_embeddings, defaults);
  c.sliding_window.assign(static_cast<size_t>(c.num_hidden_layers), 0);
  c.moe.layer_is_moe.assign(static_cast<size_t>(c.num_hidden_layers), false);

  c.family->parse(doc, k, c);

  E3_REQUIRE(c.head_dim > 0 && c.num_key_value_heads > 0, ErrorKind::Model,
             "{}: head_dim and num_key_value_heads must be positive", where);
  E3_REQUIRE(c.num_attention_heads % c.num_key_value_heads == 0, ErrorKind::Model,
             "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", where,
             c.num_attention_heads, c.num_key_value_heads);
  E3_REQUIRE(c.rope.partial_rotary_factor > 0 && c.rope.partial_rotary_factor <= 1.0, ErrorKind::Model,
             "{}: partial_rotary_factor must be in (0, 1]", where);
  c.quant = parse_quant(doc, whole, where);
  check_total_size(c, where);
  // The parser bounds the nesting, so this recursive dump stays shallow.
  c.fingerprint = Fnv1a().update(whole.dump()).hex();
  return c;
}

}  // namespace

ModelConfig parse_model_config(const json& whole, const std::filesystem::path& source) {
  try {
    return parse_config(whole, source);
  } catch (const json::exception& e) {
    // A value of a type the checks above did not expect: still a model error naming the file.
    E3_THROW(ErrorKind::Model, "{}: {}", source.string(), clip(e.what(), 200));
  }
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  return load_model_config_file(model_dir / "config.json");
}

ModelConfig load_model_config_file(const std::filesystem::path& path) {
  const json doc =
      read_json_file(path, ErrorKind::Model, "", " (is --model a HuggingFace checkpoint directory?)");
  return parse_model_config(doc, path);
}

void check_tensor_parallel(const ModelConfig& c, int tp) {
  const std::string where = c.source.string();
  E3_REQUIRE(c.num_attention_heads % tp == 0, ErrorKind::Model,
             "{}: num_attention_heads {} is not divisible by --tp {}", where, c.num_attention_heads, tp);
  if (!c.is_mla())
    E3_REQUIRE(c.num_key_value_heads % tp == 0 || tp % c.num_key_value_heads == 0, ErrorKind::Model,
               "{}: num_key_value_heads {} neither divides nor is divisible by --tp {}", where,
               c.num_key_value_heads, tp);
  const bool any_dense = std::find(c.moe.layer_is_moe.begin(), c.moe.layer_is_moe.end(), false) != c.moe.layer_is_moe.end();
  if (c.moe.num_experts == 0 || any_dense)
    E3_REQUIRE(c.intermediate_size % tp == 0, ErrorKind::Model,
               "{}: intermediate_size {} is not divisible by --tp {}", where, c.intermediate_size, tp);
  if (c.moe.num_experts > 0) {
    E3_REQUIRE(c.moe.num_experts % tp == 0, ErrorKind::Model,
               "{}: {} routed experts do not split evenly over --tp {} (expert parallelism)", where,
               c.moe.num_experts, tp);
    const int64_t shared = c.moe.moe_intermediate_size * c.moe.n_shared_experts;
    E3_REQUIRE(shared % tp == 0, ErrorKind::Model,
               "{}: the shared experts' intermediate size {} is not divisible by --tp {}", where, shared, tp);
  }
}

std::vector<int> default_capture_ids(const ModelConfig& c) {
  const int L = static_cast<int>(c.num_hidden_layers);
  E3_REQUIRE(L >= 4, ErrorKind::Usage,
             "the model has {} layers, too few for the default capture ids [2, L/2, L-3]; pass --layers", L);
  return {2, L / 2, L - 3};
}

}  // namespace e3::model
