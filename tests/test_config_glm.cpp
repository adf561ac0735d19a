// GLM-4.5 / GLM-4.6 / GLM-4.5-Air (Glm4MoeForCausalLM): config.json parsing against
// Glm4MoeConfig's keys and defaults, the partial rotary frequencies, tensor parallelism, and
// `info` on the published 355B and Air shapes at TP 8.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "jobs/info.h"
#include "core/error.h"
#include "model/config.h"
#include "model/rope.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::model::check_tensor_parallel;
using e3::model::family_name;
using e3::model::ModelConfig;
using e3::model::parse_model_config;
using e3::model::Scoring;
using e3::model::TopkMethod;
using e3::test::Contains;
using e3::test::error_of;
using nlohmann::json;

const std::filesystem::path kSource = "/models/glm/config.json";

ModelConfig parse(const json& doc) { return parse_model_config(doc, kSource); }

// A small GLM-4.5 whose values differ from Glm4MoeConfig's defaults, so that a default
// silently winning over the file shows.
json glm45() {
  return json::parse(R"({
    "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
    "hidden_size": 256, "intermediate_size": 512, "moe_intermediate_size": 64, "num_hidden_layers": 6,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 48, "partial_rotary_factor": 0.25,
    "use_qk_norm": true, "attention_bias": true, "n_shared_experts": 2, "n_routed_experts": 16,
    "num_experts_per_tok": 4, "routed_scaling_factor": 2.5, "n_group": 4, "topk_group": 2,
    "norm_topk_prob": false, "first_k_dense_replace": 2, "vocab_size": 1024, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06, "max_position_embeddings": 8192, "num_nextn_predict_layers": 1,
    "hidden_act": "silu", "tie_word_embeddings": false})");
}

TEST(ConfigGlm, ReadsEveryKeyOfTheFile) {
  const ModelConfig c = parse(glm45());
  EXPECT_STREQ(family_name(c.family), "glm4_moe");
  EXPECT_FALSE(c.is_mla());
  EXPECT_EQ(c.head_dim, 48);  // independent of hidden_size / num_attention_heads (32)
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);  // Glm4MoeAttention's o_proj never has a bias
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.moe.num_experts, 16);
  EXPECT_EQ(c.moe.experts_per_token, 4);
  EXPECT_EQ(c.moe.moe_intermediate_size, 64);
  EXPECT_EQ(c.moe.n_shared_experts, 2);
  EXPECT_EQ(c.moe.scoring, Scoring::Sigmoid);
  EXPECT_EQ(c.moe.topk_method, TopkMethod::NoAuxTc);
  EXPECT_TRUE(c.moe.has_correction_bias());
  EXPECT_EQ(c.moe.n_group, 4);
  EXPECT_EQ(c.moe.topk_group, 2);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.moe.layer_is_moe, std::vector<bool>({false, false, true, true, true, true}));
}

TEST(ConfigGlm, DefaultsAreGlm4MoeConfigs) {
  json d = glm45();
  for (const char* key : {"partial_rotary_factor", "use_qk_norm", "attention_bias", "n_shared_experts",
                          "n_routed_experts", "num_experts_per_tok", "routed_scaling_factor", "n_group", "topk_group",
                          "norm_topk_prob", "first_k_dense_replace", "moe_intermediate_size", "rms_norm_eps",
                          "head_dim"})
    d.erase(key);
  d["num_hidden_layers"] = 3;
  const ModelConfig c = parse(d);
  EXPECT_DOUBLE_EQ(c.rope.partial_rotary_factor, 0.5);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.head_dim, 32);  // HF: hidden_size / num_attention_heads when head_dim is absent
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.experts_per_token, 8);
  EXPECT_EQ(c.moe.moe_intermediate_size, 1408);
  EXPECT_EQ(c.moe.n_shared_experts, 1);
  EXPECT_EQ(c.moe.n_group, 1);
  EXPECT_EQ(c.moe.topk_group, 1);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.moe.layer_is_moe, std::vector<bool>({false, true, true}));
}

TEST(ConfigGlm, ModelTypeAloneSelectsTheFamily) {
  json d = glm45();
  d["architectures"] = {"Glm4MoeForSomethingElse"};
  EXPECT_STREQ(family_name(parse(d).family), "glm4_moe");
  d.erase("architectures");
  EXPECT_STREQ(family_name(parse(d).family), "glm4_moe");
}

// HF's Glm4MoeTopkRouter is DeepSeek-V3's whatever the file says: it reads neither key.
TEST(ConfigGlm, RouterIgnoresScoringAndTopkKeys) {
  json d = glm45();
  d["scoring_func"] = "softmax";
  d["topk_method"] = "greedy";
  d["moe_layer_freq"] = 2;
  const ModelConfig c = parse(d);
  EXPECT_EQ(c.moe.scoring, Scoring::Sigmoid);
  EXPECT_EQ(c.moe.topk_method, TopkMethod::NoAuxTc);
  EXPECT_EQ(c.moe.layer_is_moe, std::vector<bool>({false, false, true, true, true, true}));
}

TEST(ConfigGlm, RotaryFactorInsideRopeParametersWins) {
  json d = glm45();
  d.erase("partial_rotary_factor");
  d["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.75}};
  EXPECT_DOUBLE_EQ(parse(d).rope.partial_rotary_factor, 0.75);
}

TEST(ConfigGlm, BadValuesAreModelErrorsNamingTheKey) {
  for (auto [key, value, part] :
       {std::tuple<const char*, json, const char*>{"partial_rotary_factor", 1.5, "partial_rotary_factor"},
        {"n_group", 3, "n_group"},
        {"num_experts_per_tok", 17, "num_experts_per_tok"},
        {"use_qk_norm", "yes", "use_qk_norm"},
        {"num_key_value_heads", 3, "num_key_value_heads"}}) {
    json d = glm45();
    d[key] = value;
    auto err = error_of([&] { parse(d); });
    ASSERT_TRUE(err.has_value()) << key;
    EXPECT_EQ(err->kind(), ErrorKind::Model) << key;
    EXPECT_TRUE(Contains(err->what(), kSource.string())) << err->what();
    EXPECT_TRUE(Contains(err->what(), part)) << err->what();
  }
}

// Rotate-half on the first head_dim * partial_rotary_factor columns, its frequencies computed
// over that rotary dimension (HF: dim = int(head_dim * partial_rotary_factor)).
TEST(ConfigGlm, RotaryFrequenciesSpanTheRotaryDimsOnly) {
  const ModelConfig c = parse(glm45());
  const auto f = e3::model::compute_rope_frequencies(c.rope, static_cast<int>(c.head_dim), c.max_position_embeddings);
  ASSERT_EQ(f.rot_dim, 12);
  ASSERT_EQ(f.inv_freq.size(), 6u);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(f.inv_freq[static_cast<size_t>(i)], 1.0 / std::pow(1e6, 2.0 * i / 12.0), 1e-6 * f.inv_freq[0]) << i;
}

TEST(ConfigGlm, SplitsLikeTheDeepseekFamily) {
  const ModelConfig c = parse(glm45());
  check_tensor_parallel(c, 2);  // kv heads split
  check_tensor_parallel(c, 4);  // kv heads replicated, 4 experts a rank
  auto err = error_of([&] { check_tensor_parallel(c, 32); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
}

// ---------------------------------------------------------------- info on the published shapes

std::filesystem::path data_dir(const char* name) {
  return std::filesystem::path(E3_GOLDEN_DIR).parent_path() / "data" / name;
}

double weights_gib(const std::string& text) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(R"(cuda \(bf16\)\s+weights ([0-9.]+) GiB)"))) return -1;
  return std::stod(m[1].str());
}

TEST(InfoGlm, Glm45AtTp8ReportsLayersAndMemoryPerRank) {
  e3::jobs::InfoOptions o;
  o.model_dir = data_dir("glm45_355b");
  o.tp = 8;
  o.gpu_memory_gib = 141;
  const std::string text = e3::jobs::model_info(o);
  EXPECT_TRUE(Contains(text, "family glm4_moe")) << text;
  EXPECT_TRUE(Contains(text, "96 heads, 8 kv heads, head_dim 128, qkv bias, q/k norm")) << text;
  EXPECT_TRUE(Contains(text, "89 of 92 layers: 160 experts (8 per token, intermediate 1536), 1 shared")) << text;
  EXPECT_TRUE(Contains(text, "router sigmoid noaux_tc")) << text;
  EXPECT_TRUE(Contains(text, "partial_rotary_factor 0.5 (the first 64 of 128 dims of each head)")) << text;
  EXPECT_TRUE(Contains(text, "default layers   [2, 46, 89]")) << text;
  // Per rank: 89 MoE layers x 20 experts x 3 x 5120 x 1536 bf16 (78.2 GiB), attention split
  // 8 ways (2.9 GiB), the replicated embedding (1.4 GiB), shared experts, routers and the 3
  // dense MLPs (0.8 GiB): about 83.3 GiB.
  const double w = weights_gib(text);
  EXPECT_GT(w, 82.0) << text;
  EXPECT_LT(w, 85.0) << text;
  EXPECT_TRUE(Contains(text, "fits 141 GiB   yes")) << text;
}

TEST(InfoGlm, Glm45AirAtTp8ReportsLayersAndMemoryPerRank) {
  e3::jobs::InfoOptions o;
  o.model_dir = data_dir("glm45_air");
  o.tp = 8;
  o.gpu_memory_gib = 141;
  const std::string text = e3::jobs::model_info(o);
  EXPECT_TRUE(Contains(text, "96 heads, 8 kv heads, head_dim 128, qkv bias")) << text;
  EXPECT_FALSE(Contains(text, "q/k norm")) << text;
  EXPECT_TRUE(Contains(text, "45 of 46 layers: 128 experts (8 per token, intermediate 1408), 1 shared")) << text;
  EXPECT_TRUE(Contains(text, "default layers   [2, 23, 43]")) << text;
  // Per rank: 45 MoE layers x 16 experts x 3 x 4096 x 1408 bf16 (23.2 GiB), attention (1.2
  // GiB), the embedding (1.2 GiB), the rest (0.3 GiB): about 25.8 GiB.
  const double w = weights_gib(text);
  EXPECT_GT(w, 25.0) << text;
  EXPECT_LT(w, 27.0) << text;
  EXPECT_TRUE(Contains(text, "fits 141 GiB   yes")) << text;
}

}  // namespace
