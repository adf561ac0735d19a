// Config pieces that architecture families combine (declared in model/arch.h).
#include <cmath>

#include <nlohmann/json.hpp>

#include "model/arch.h"
#include "model/rope.h"

namespace e3::model {

using nlohmann::json;

void parse_sliding_window(const json& doc, const ConfigKeys& k, int64_t size, int64_t first_layer, ModelConfig& c) {
  const int64_t layers = c.num_hidden_layers;
  std::vector<bool> sliding(static_cast<size_t>(layers), false);
  for (int64_t i = 0; i < layers; ++i) sliding[static_cast<size_t>(i)] = size > 0 && i >= first_layer;
  if (doc.contains("layer_types") && doc["layer_types"].is_array() && size > 0) {
    const json& types = doc["layer_types"];
    E3_REQUIRE(static_cast<int64_t>(types.size()) == layers, ErrorKind::Model,
               "{}: layer_types has {} entries for {} layers", k.where(), types.size(), layers);
    for (int64_t i = 0; i < layers; ++i)
      sliding[static_cast<size_t>(i)] = types[static_cast<size_t>(i)] == "sliding_attention";
  }
  c.sliding_window.assign(static_cast<size_t>(layers), 0);
  for (int64_t i = 0; i < layers; ++i)
    if (sliding[static_cast<size_t>(i)]) c.sliding_window[static_cast<size_t>(i)] = size;
}

void parse_mla(const ConfigKeys& k, bool read_rope_interleave, ModelConfig& c) {
  MlaConfig& m = c.mla;
  m.q_lora_rank = k.size_or("q_lora_rank", 0, kMaxHidden);
  m.kv_lora_rank = k.size("kv_lora_rank", kMaxHidden);
  m.qk_nope_head_dim = k.size("qk_nope_head_dim", kMaxHeadDim);
  m.qk_rope_head_dim = k.size("qk_rope_head_dim", kMaxHeadDim);
  m.v_head_dim = k.size("v_head_dim", kMaxHeadDim);
  m.rope_interleave = read_rope_interleave ? k.boolean_or("rope_interleave", true) : true;
  m.attention_bias = k.boolean_or("attention_bias", false);
  E3_REQUIRE(m.q_lora_rank >= 0, ErrorKind::Model, "{}: q_lora_rank must be positive or null", k.where());
  double scale = 1.0 / std::sqrt(static_cast<double>(m.qk_head_dim()));
  const RopeConfig& rope = c.rope;
  if (rope.type != "default" && rope.mscale_all_dim && *rope.mscale_all_dim != 0) {
    const double mscale = yarn_get_mscale(rope.factor, *rope.mscale_all_dim);
    scale *= mscale * mscale;
  }
  m.softmax_scale = scale;
  c.head_dim = m.qk_rope_head_dim;  // as HF: the rotary dimension
}

namespace {

// A router name of config.json, checked against its name table where the layers have experts.
// A model error in the config's own words, not named_enum's usage message.
template <class E>
E router_kind(const ConfigKeys& k, const char* key, E fallback, bool has_experts) {
  const std::string name = k.string_or(key, std::string(name_of(fallback)));
  const std::optional<E> e = value_named<E>(name);
  if (!has_experts) return e.value_or(fallback);
  E3_REQUIRE(e.has_value(), ErrorKind::Model, "{}: {} '{}' is not supported ({})", k.where(), key, name,
             joined_names<E>(", ", ", "));
  return *e;
}

}  // namespace

void parse_grouped_moe(const ConfigKeys& k, const GroupedMoeDefaults& d, ModelConfig& c) {
  MoeConfig& m = c.moe;
  m.num_experts = k.size_or("n_routed_experts", d.num_experts, kMaxExperts);
  m.experts_per_token = k.size_or("num_experts_per_tok", d.experts_per_token, kMaxExperts);
  m.moe_intermediate_size = k.size_or("moe_intermediate_size", d.moe_intermediate_size, kMaxIntermediate);
  m.n_shared_experts = k.size_or("n_shared_experts", d.n_shared_experts, kMaxExperts);
  m.scoring = d.router_keys ? router_kind(k, "scoring_func", d.scoring, m.num_experts > 0) : d.scoring;
  m.topk_method =
      d.router_keys ? router_kind(k, "topk_method", d.topk_method, m.num_experts > 0) : d.topk_method;
  m.n_group = k.integer_or("n_group", 1);
  m.topk_group = k.integer_or("topk_group", 1);
  m.norm_topk_prob = k.boolean_or("norm_topk_prob", d.norm_topk_prob);
  m.routed_scaling_factor = k.number_or("routed_scaling_factor", d.routed_scaling_factor);
  const int64_t first_dense = k.integer_or("first_k_dense_replace", d.first_k_dense_replace);
  const int64_t freq = d.moe_layer_freq ? k.integer_or("moe_layer_freq", 1) : 1;
  E3_REQUIRE(freq > 0, ErrorKind::Model, "{}: moe_layer_freq must be positive", k.where());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    m.layer_is_moe[static_cast<size_t>(l)] = m.num_experts > 0 && l >= first_dense && l % freq == 0;
  check_moe(k, m);
}

void check_moe(const ConfigKeys& k, const MoeConfig& m) {
  if (m.num_experts == 0) return;
  E3_REQUIRE(m.experts_per_token > 0 && m.experts_per_token <= m.num_experts && m.moe_intermediate_size > 0,
             ErrorKind::Model, "{}: num_experts_per_tok {} and moe_intermediate_size {} must be positive (experts {})",
             k.where(), m.experts_per_token, m.moe_intermediate_size, m.num_experts);
  E3_REQUIRE(m.n_group > 0 && m.num_experts % m.n_group == 0 && m.topk_group > 0 && m.topk_group <= m.n_group,
             ErrorKind::Model, "{}: n_group {} must divide the {} experts and topk_group {} must be in [1, n_group]",
             k.where(), m.n_group, m.num_experts, m.topk_group);
}

}  // namespace e3::model
