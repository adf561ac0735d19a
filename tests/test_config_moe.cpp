// config.json parsing for the MLA and MoE families (DeepSeek-V2/V3, Kimi-K2 and its nested
// K2.5 wrapper, Qwen3-MoE), their tensor-parallel checks, and `info` on a Kimi-K2 config.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jobs/info.h"
#include "core/error.h"
#include "model/config.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::model::check_tensor_parallel;
using e3::model::family_name;
using e3::model::Scoring;
using e3::model::TopkMethod;
using e3::model::ModelConfig;
using e3::model::parse_model_config;
using e3::test::Contains;
using e3::test::error_of;
using nlohmann::json;

const std::filesystem::path kSource = "/models/test/config.json";

ModelConfig parse(const json& doc) { return parse_model_config(doc, kSource); }

void expect_config_error(const json& doc, const std::string& part) {
  auto err = error_of([&] { parse(doc); });
  ASSERT_TRUE(err.has_value()) << "no error for " << doc.dump();
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), kSource.string()));
  EXPECT_TRUE(Contains(err->what(), part));
}

void expect_tp_error(const ModelConfig& c, int tp, const std::string& part) {
  auto err = error_of([&] { check_tensor_parallel(c, tp); });
  ASSERT_TRUE(err.has_value()) << "no error at tp " << tp;
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), part));
}

// A small DeepSeek-V3 whose values all differ from the family defaults, so that a default
// silently winning over the file shows.
json deepseek_v3() {
  return json::parse(R"({
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "n_routed_experts": 16,
    "num_experts_per_tok": 4,
    "n_shared_experts": 1,
    "n_group": 4,
    "topk_group": 2,
    "routed_scaling_factor": 2.827,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "q_lora_rank": 96,
    "kv_lora_rank": 64,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 24
  })");
}

json deepseek_v2() {
  json d = deepseek_v3();
  d["architectures"] = {"DeepseekV2ForCausalLM"};
  d["model_type"] = "deepseek_v2";
  return d;
}

json qwen3_moe() {
  return json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": 1000,
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "decoder_sparse_step": 2,
    "mlp_only_layers": [0]
  })");
}

json yarn(double factor) {
  return {{"type", "yarn"}, {"factor", factor}, {"original_max_position_embeddings", 4096}, {"mscale", 1.0}};
}

// ---------------------------------------------------------------- MLA

TEST(ConfigMla, DeepseekV3IsRecognisedByArchitectureOrModelType) {
  struct Case {
    const char* arch;
    const char* model_type;
  };
  for (const Case& k : {Case{"DeepseekV3ForCausalLM", "deepseek_v3"}, Case{nullptr, "deepseek_v3"},
                        Case{nullptr, "kimi_k2"}, Case{"KimiK2ForCausalLM", "kimi_k2"}}) {
    json d = deepseek_v3();
    d["model_type"] = k.model_type;
    if (k.arch) d["architectures"] = {k.arch};
    else d.erase("architectures");
    const ModelConfig c = parse(d);
    EXPECT_STREQ(family_name(c.family), "deepseek_v3") << k.model_type;
    EXPECT_TRUE(c.is_mla()) << k.model_type;
    EXPECT_EQ(c.model_type, k.model_type);
    EXPECT_EQ(c.tensor_prefix, "");
  }
}

TEST(ConfigMla, ReadsMlaShapes) {
  const ModelConfig c = parse(deepseek_v3());
  EXPECT_EQ(c.mla.q_lora_rank, 96);
  EXPECT_EQ(c.mla.kv_lora_rank, 64);
  EXPECT_EQ(c.mla.qk_nope_head_dim, 32);
  EXPECT_EQ(c.mla.qk_rope_head_dim, 16);
  EXPECT_EQ(c.mla.v_head_dim, 24);
  EXPECT_EQ(c.mla.qk_head_dim(), 48);
  // As HF: head_dim is the rotary dimension, not hidden / heads (32).
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.mla.rope_interleave);
  EXPECT_FALSE(c.mla.attention_bias);
}

TEST(ConfigMla, NullOrAbsentQLoraRankMeansPlainQProj) {
  json d = deepseek_v3();
  d["q_lora_rank"] = nullptr;
  EXPECT_EQ(parse(d).mla.q_lora_rank, 0);
  d.erase("q_lora_rank");
  EXPECT_EQ(parse(d).mla.q_lora_rank, 0);
}

TEST(ConfigMla, RopeInterleaveFollowsTheFileForV3) {
  json d = deepseek_v3();
  d["rope_interleave"] = false;
  EXPECT_FALSE(parse(d).mla.rope_interleave);
  d["rope_interleave"] = true;
  EXPECT_TRUE(parse(d).mla.rope_interleave);
}

TEST(ConfigMla, DeepseekV2AlwaysInterleaves) {
  json d = deepseek_v2();
  d["rope_interleave"] = false;
  const ModelConfig c = parse(d);
  EXPECT_STREQ(family_name(c.family), "deepseek_v2");
  EXPECT_TRUE(c.is_mla());
  EXPECT_TRUE(c.mla.rope_interleave);
}

TEST(ConfigMla, SoftmaxScaleWithoutYarnIsQkHeadDimInverseSqrt) {
  EXPECT_DOUBLE_EQ(parse(deepseek_v3()).mla.softmax_scale, 1.0 / std::sqrt(48.0));
}

TEST(ConfigMla, YarnMscaleAllDimScalesSoftmaxByMscaleSquared) {
  for (double all_dim : {1.0, 0.707}) {
    json d = deepseek_v3();
    d["rope_scaling"] = yarn(40.0);
    d["rope_scaling"]["mscale_all_dim"] = all_dim;
    const double mscale = 0.1 * all_dim * std::log(40.0) + 1.0;
    EXPECT_NEAR(parse(d).mla.softmax_scale, mscale * mscale / std::sqrt(48.0), 1e-12) << all_dim;
  }
}

TEST(ConfigMla, YarnWithoutMscaleAllDimLeavesSoftmaxScale) {
  json d = deepseek_v3();
  d["rope_scaling"] = yarn(40.0);
  EXPECT_DOUBLE_EQ(parse(d).mla.softmax_scale, 1.0 / std::sqrt(48.0));
  d["rope_scaling"]["mscale_all_dim"] = 0.0;
  EXPECT_DOUBLE_EQ(parse(d).mla.softmax_scale, 1.0 / std::sqrt(48.0));
}

// ---------------------------------------------------------------- MoE

TEST(ConfigMoe, DeepseekV3MoeLayersFollowFirstDenseAndFrequency) {
  json d = deepseek_v3();
  d["num_hidden_layers"] = 9;
  d["first_k_dense_replace"] = 2;
  d["moe_layer_freq"] = 2;
  EXPECT_EQ(parse(d).moe.layer_is_moe,
            (std::vector<bool>{false, false, true, false, true, false, true, false, true}));
  d["first_k_dense_replace"] = 0;
  d["moe_layer_freq"] = 1;
  EXPECT_EQ(parse(d).moe.layer_is_moe, std::vector<bool>(9, true));
}

TEST(ConfigMoe, DeepseekV3ReadsTheRouterAndAppliesItsDefaults) {
  json d = deepseek_v3();
  ModelConfig c = parse(d);
  EXPECT_EQ(c.moe.num_experts, 16);
  EXPECT_EQ(c.moe.experts_per_token, 4);
  EXPECT_EQ(c.moe.moe_intermediate_size, 64);
  EXPECT_EQ(c.moe.n_shared_experts, 1);
  EXPECT_EQ(c.moe.n_group, 4);
  EXPECT_EQ(c.moe.topk_group, 2);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 2.827);
  EXPECT_EQ(c.moe.scoring, Scoring::Sigmoid);
  EXPECT_EQ(c.moe.topk_method, TopkMethod::NoAuxTc);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_TRUE(c.moe.has_correction_bias());

  d["scoring_func"] = "softmax";
  d["topk_method"] = "group_limited_greedy";
  d["norm_topk_prob"] = false;
  c = parse(d);
  EXPECT_EQ(c.moe.scoring, Scoring::Softmax);
  EXPECT_EQ(c.moe.topk_method, TopkMethod::GroupLimitedGreedy);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_FALSE(c.moe.has_correction_bias());
}

TEST(ConfigMoe, DeepseekV2Defaults) {
  for (bool by_arch : {true, false}) {
    json d = deepseek_v2();
    if (!by_arch) d.erase("architectures");
    d.erase("n_shared_experts");
    const ModelConfig c = parse(d);
    EXPECT_STREQ(family_name(c.family), "deepseek_v2");
    EXPECT_EQ(c.moe.scoring, Scoring::Softmax);
    EXPECT_EQ(c.moe.topk_method, TopkMethod::Greedy);
    EXPECT_FALSE(c.moe.norm_topk_prob);
    EXPECT_FALSE(c.moe.has_correction_bias());
    EXPECT_EQ(c.moe.n_shared_experts, 2);
  }
}

TEST(ConfigMoe, Qwen3MoeLayersFollowSparseStepAndMlpOnlyLayers) {
  json d = qwen3_moe();
  ModelConfig c = parse(d);
  EXPECT_STREQ(family_name(c.family), "qwen3_moe");
  EXPECT_FALSE(c.is_mla());
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.moe.num_experts, 16);
  EXPECT_EQ(c.moe.experts_per_token, 4);
  EXPECT_EQ(c.moe.moe_intermediate_size, 64);
  EXPECT_EQ(c.moe.scoring, Scoring::Softmax);
  EXPECT_EQ(c.moe.topk_method, TopkMethod::Greedy);
  EXPECT_EQ(c.moe.layer_is_moe, (std::vector<bool>{false, true, false, true, false, true}));

  // Layer 0 is dense under step 2 anyway; these make mlp_only_layers decide something.
  d["decoder_sparse_step"] = 1;
  EXPECT_EQ(parse(d).moe.layer_is_moe, (std::vector<bool>{false, true, true, true, true, true}));
  d["mlp_only_layers"] = {3, 4};
  EXPECT_EQ(parse(d).moe.layer_is_moe, (std::vector<bool>{true, true, true, false, false, true}));

  d.erase("architectures");
  EXPECT_STREQ(family_name(parse(d).family), "qwen3_moe");
}

TEST(ConfigMoe, RejectsUnsupportedScoringFunc) {
  json d = deepseek_v3();
  d["scoring_func"] = "tanh";
  expect_config_error(d, "scoring_func 'tanh' is not supported (softmax, sigmoid)");
}

TEST(ConfigMoe, RejectsUnsupportedTopkMethod) {
  json d = deepseek_v3();
  d["topk_method"] = "random";
  expect_config_error(d, "topk_method 'random' is not supported (greedy, group_limited_greedy, noaux_tc)");
}

TEST(ConfigMoe, RejectsGroupsThatDoNotDivideExperts) {
  json d = deepseek_v3();
  d["n_group"] = 3;
  expect_config_error(d, "n_group");
}

TEST(ConfigMoe, RejectsTopkGroupAboveNGroup) {
  json d = deepseek_v3();
  d["topk_group"] = 5;
  expect_config_error(d, "topk_group");
}

TEST(ConfigMoe, RejectsMoreExpertsPerTokenThanExperts) {
  json d = deepseek_v3();
  d["num_experts_per_tok"] = 17;
  expect_config_error(d, "num_experts_per_tok");
  d = qwen3_moe();
  d["num_experts_per_tok"] = 17;
  expect_config_error(d, "num_experts_per_tok");
}

TEST(ConfigMoe, TensorParallelNeedsExpertsDivisible) {
  json d = deepseek_v3();
  d["n_routed_experts"] = 12;
  const ModelConfig c = parse(d);
  EXPECT_FALSE(error_of([&] { check_tensor_parallel(c, 4); }).has_value());
  expect_tp_error(c, 8, "experts");
}

TEST(ConfigMoe, TensorParallelNeedsSharedExpertsIntermediateDivisible) {
  json d = deepseek_v3();
  d["moe_intermediate_size"] = 36;
  d["n_shared_experts"] = 1;
  expect_tp_error(parse(d), 8, "shared");
  // 36 * 2 = 72 splits over 8: the check is on the product.
  d["n_shared_experts"] = 2;
  const ModelConfig c = parse(d);
  EXPECT_FALSE(error_of([&] { check_tensor_parallel(c, 8); }).has_value());
}

TEST(ConfigMoe, TensorParallelIgnoresKvHeadsForMla) {
  json d = deepseek_v3();
  d["num_attention_heads"] = 24;
  d["num_key_value_heads"] = 3;
  const ModelConfig mla = parse(d);
  EXPECT_FALSE(error_of([&] { check_tensor_parallel(mla, 8); }).has_value());

  // The same head counts do matter for a model with real kv heads.
  json q = qwen3_moe();
  q["num_attention_heads"] = 24;
  q["num_key_value_heads"] = 3;
  expect_tp_error(parse(q), 8, "num_key_value_heads");
}

TEST(ConfigMoe, TensorParallelChecksDenseIntermediateOnlyWhenADenseLayerExists) {
  json d = deepseek_v3();
  d["intermediate_size"] = 100;
  d["first_k_dense_replace"] = 1;
  expect_tp_error(parse(d), 8, "intermediate_size");
  d["first_k_dense_replace"] = 0;
  const ModelConfig all_moe = parse(d);
  EXPECT_FALSE(error_of([&] { check_tensor_parallel(all_moe, 8); }).has_value());
}

// ---------------------------------------------------------------- nested (Kimi-K2.5)

json kimi_k25() {
  json text = deepseek_v3();
  text.erase("architectures");
  text["model_type"] = "kimi_k2";
  return {{"architectures", {"KimiK25ForConditionalGeneration"}},
          {"model_type", "kimi_k25"},
          {"text_config", text},
          {"vision_config",
           {{"model_type", "moonvit"}, {"hidden_size", 1152}, {"num_hidden_layers", 27},
            {"num_attention_heads", 16}, {"intermediate_size", 4304}}}};
}

TEST(ConfigNested, KimiK25ReadsTextConfigUnderLanguageModelPrefix) {
  const ModelConfig c = parse(kimi_k25());
  EXPECT_STREQ(family_name(c.family), "deepseek_v3");
  EXPECT_TRUE(c.is_mla());
  EXPECT_EQ(c.tensor_prefix, "language_model.");
  EXPECT_EQ(c.architecture, "KimiK25ForConditionalGeneration");
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 512);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.mla.kv_lora_rank, 64);
  EXPECT_EQ(c.moe.num_experts, 16);
  EXPECT_EQ(c.moe.layer_is_moe, (std::vector<bool>{false, true, true, true, true, true}));
}

TEST(ConfigNested, ErrorsNameTheTextConfig) {
  json d = kimi_k25();
  d["text_config"].erase("kv_lora_rank");
  expect_config_error(d, "text_config");
  expect_config_error(d, "kv_lora_rank");
}

// ---------------------------------------------------------------- info

std::filesystem::path kimi_k2_dir() {
  return std::filesystem::path(E3_GOLDEN_DIR).parent_path() / "data" / "kimi_k2_61layer";
}

TEST(InfoKimi, K2AtTp8ReportsExpertsLayersAndMemory) {
  e3::jobs::InfoOptions o;
  o.model_dir = kimi_k2_dir();
  o.tp = 8;
  o.gpu_memory_gib = 141;
  const std::string text = e3::jobs::model_info(o);
  EXPECT_TRUE(Contains(text, "384 experts"));
  EXPECT_TRUE(Contains(text, "default layers   [2, 30, 58]"));
  EXPECT_TRUE(Contains(text, "fits 141 GiB   NO"));
  // 4 rows (3 ids and the final state) of 7168: bf16 2 bytes a value, fp8 1 plus a 4-byte scale.
  EXPECT_TRUE(Contains(text, "output per token bf16 56.0 KiB, fp8 28.0 KiB, fp32 112.0 KiB")) << text;

  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(cuda \(bf16\)\s+weights ([0-9.]+) GiB)"))) << text;
  // Per rank: 60 MoE layers x 48 experts x 3 x 7168 x 2048 bf16 (236.25 GiB) plus the
  // replicated and sharded dense parts; about 242.7 GiB in all.
  const double weights = std::stod(m[1].str());
  EXPECT_GT(weights, 240.0) << text;
  EXPECT_LT(weights, 246.0) << text;
}

// E3_MOE_UNFUSED=1 writes gate|up for a silu kernel of its own, which `info` must count: at TP 8 each
// rank holds 48 whole experts, so [16384 tokens x top 8, 2 x 2048] bf16 = 1 GiB more.
TEST(InfoKimi, TheUnfusedSiluCountsItsGateUpScratch) {
  auto workspace = [](const e3::Environment& env) {
    e3::jobs::InfoOptions o;
    o.model_dir = kimi_k2_dir();
    o.tp = 8;
    o.env = env;
    const std::string text = e3::jobs::model_info(o);
    std::smatch m;
    EXPECT_TRUE(std::regex_search(text, m, std::regex(R"(cuda \(bf16\)\s+weights [0-9.]+ GiB, workspace ([0-9.]+) GiB)")))
        << text;
    return m.empty() ? 0.0 : std::stod(m[1].str());
  };
  using Vars = std::map<std::string, std::string>;
  const double fused = workspace(e3::Environment{}), unfused = workspace(e3::Environment(Vars{{"E3_MOE_UNFUSED", "1"}}));
  EXPECT_NEAR(unfused - fused, 1.0, 0.0011) << "fused " << fused << " GiB, unfused " << unfused << " GiB";
  EXPECT_THROW(workspace(e3::Environment(Vars{{"E3_MOE_UNFUSED", "yes"}})), e3::Error);
}

TEST(InfoKimi, K25WithInt4ExpertsAtTp8FitsAnH200) {
  e3::jobs::InfoOptions o;
  o.model_dir = std::filesystem::path(kimi_k2_dir()).parent_path() / "kimi_k25_61layer";
  o.tp = 8;
  o.gpu_memory_gib = 141;
  const std::string text = e3::jobs::model_info(o);
  EXPECT_TRUE(Contains(text, "quantization     int4 pack-quantized, symmetric, group 32")) << text;
  EXPECT_TRUE(Contains(text, "fits 141 GiB   yes")) << text;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(cuda \(bf16\)\s+weights ([0-9.]+) GiB)"))) << text;
  // Per rank: 60 MoE layers x 48 experts x 3 x 7168 x 2048 int4 with a bf16 scale per 32
  // (0.5625 bytes each: 66.45 GiB) plus the same bf16 dense parts as Kimi-K2 (about 6.4 GiB).
  const double weights = std::stod(m[1].str());
  EXPECT_GT(weights, 71.0) << text;
  EXPECT_LT(weights, 74.0) << text;
}

}  // namespace
