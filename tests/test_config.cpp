// config.json parsing (families, sliding windows, RoPE standardisation), tensor-parallel
// checks, default capture ids, and the RoPE frequency math.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/rope.h"
#include "support/test_support.h"

namespace {

using e3::ErrorKind;
using e3::model::check_tensor_parallel;
using e3::model::compute_rope_frequencies;
using e3::model::default_capture_ids;
using e3::model::family_name;
using e3::model::ModelConfig;
using e3::model::parse_model_config;
using e3::model::RopeConfig;
using e3::model::RopeFrequencies;
using e3::model::yarn_get_mscale;
using nlohmann::json;

const std::filesystem::path kSource = "/models/test/config.json";

using e3::test::Contains;
using e3::test::error_of;

// Expects parsing `doc` to fail with a model error that names the config file and `part`.
void expect_config_error(const json& doc, const std::string& part) {
  auto err = error_of([&] { parse_model_config(doc, kSource); });
  ASSERT_TRUE(err.has_value()) << "no error for " << doc.dump();
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), kSource.string()));
  EXPECT_TRUE(Contains(err->what(), part));
}

json llama() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0
  })");
}

json with_family(const std::string& arch, const std::string& model_type) {
  json doc = llama();
  doc["architectures"] = json::array({arch});
  doc["model_type"] = model_type;
  return doc;
}

json mistral() { return with_family("MistralForCausalLM", "mistral"); }
json qwen2() { return with_family("Qwen2ForCausalLM", "qwen2"); }
json qwen3() { return with_family("Qwen3ForCausalLM", "qwen3"); }

ModelConfig parse(const json& doc) { return parse_model_config(doc, kSource); }

RopeConfig rope_of(const json& doc) { return parse(doc).rope; }

std::vector<int64_t> windows(int64_t layers, int64_t size) {
  return std::vector<int64_t>(static_cast<size_t>(layers), size);
}

// ---------------------------------------------------------------------------------------------
// Families and shapes

TEST(ConfigLlama, HeadDimAbsentIsDerived) {
  const ModelConfig c = parse(llama());
  EXPECT_STREQ(family_name(c.family), "llama");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.source, kSource);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, windows(8, 0));
  EXPECT_EQ(c.rope.type, "default");
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
}

TEST(ConfigLlama, HeadDimNullIsDerived) {
  json doc = llama();
  doc["head_dim"] = nullptr;
  EXPECT_EQ(parse(doc).head_dim, 32);
}

TEST(ConfigLlama, ExplicitHeadDimWins) {
  json doc = llama();
  doc["head_dim"] = 64;
  EXPECT_EQ(parse(doc).head_dim, 64);
}

TEST(ConfigLlama, AttentionAndMlpBias) {
  json doc = llama();
  doc["attention_bias"] = true;
  doc["mlp_bias"] = true;
  const ModelConfig c = parse(doc);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
  EXPECT_TRUE(c.mlp_bias);
}

TEST(ConfigLlama, KvHeadsDefaultToAttentionHeads) {
  json doc = llama();
  doc.erase("num_key_value_heads");
  EXPECT_EQ(parse(doc).num_key_value_heads, 8);
}

TEST(ConfigLlama, UnknownArchitectureWithKnownModelType) {
  EXPECT_STREQ(family_name(parse(with_family("LlamaForSomethingElse", "llama")).family), "llama");
}

TEST(ConfigMistral, SlidingWindowAbsentDefaultsTo4096OnEveryLayer) {
  const ModelConfig c = parse(mistral());
  EXPECT_STREQ(family_name(c.family), "mistral");
  EXPECT_EQ(c.sliding_window, windows(8, 4096));
}

TEST(ConfigMistral, SlidingWindowNullMeansNone) {
  json doc = mistral();
  doc["sliding_window"] = nullptr;
  EXPECT_EQ(parse(doc).sliding_window, windows(8, 0));
}

TEST(ConfigMistral, ExplicitSlidingWindow) {
  json doc = mistral();
  doc["sliding_window"] = 1024;
  EXPECT_EQ(parse(doc).sliding_window, windows(8, 1024));
}

TEST(ConfigQwen2, BiasOnQkvOnly) {
  const ModelConfig c = parse(qwen2());
  EXPECT_STREQ(family_name(c.family), "qwen2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 32);
}

TEST(ConfigQwen2, UseSlidingWindowFalseGivesNoWindow) {
  json doc = qwen2();
  doc["use_sliding_window"] = false;
  doc["sliding_window"] = 1024;
  doc["max_window_layers"] = 2;
  EXPECT_EQ(parse(doc).sliding_window, windows(8, 0));
}

TEST(ConfigQwen2, WindowsOnlyFromMaxWindowLayers) {
  json doc = qwen2();
  doc["use_sliding_window"] = true;
  doc["sliding_window"] = 1024;
  doc["max_window_layers"] = 5;
  EXPECT_EQ(parse(doc).sliding_window, (std::vector<int64_t>{0, 0, 0, 0, 0, 1024, 1024, 1024}));
}

TEST(ConfigQwen2, DefaultMaxWindowLayersIs28) {
  json doc = qwen2();
  doc["num_hidden_layers"] = 30;
  doc["use_sliding_window"] = true;
  const ModelConfig c = parse(doc);
  std::vector<int64_t> expected = windows(30, 0);
  expected[28] = expected[29] = 4096;
  EXPECT_EQ(c.sliding_window, expected);
}

TEST(ConfigQwen3, QkNormAndHeadDimDefault128) {
  const ModelConfig c = parse(qwen3());
  EXPECT_STREQ(family_name(c.family), "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);  // not hidden_size / heads = 32
  EXPECT_EQ(c.sliding_window, windows(8, 0));
}

TEST(ConfigQwen3, ExplicitHeadDimAndBias) {
  json doc = qwen3();
  doc["head_dim"] = 64;
  doc["attention_bias"] = true;
  const ModelConfig c = parse(doc);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.o_bias);
}

// ---------------------------------------------------------------------------------------------
// Errors

TEST(ConfigErrors, UnsupportedArchitecture) {
  expect_config_error(with_family("GPT2LMHeadModel", "gpt2"), "unsupported architecture 'GPT2LMHeadModel'");
}

TEST(ConfigErrors, MissingHiddenSize) {
  json doc = llama();
  doc.erase("hidden_size");
  expect_config_error(doc, "required key 'hidden_size' is missing");
}

TEST(ConfigErrors, NullCountsAsMissing) {
  json doc = llama();
  doc["vocab_size"] = nullptr;
  expect_config_error(doc, "'vocab_size' is missing");
}

TEST(ConfigErrors, BadTypes) {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"hidden_size", "256", "'hidden_size' must be an integer, got \"256\""},
      {"num_hidden_layers", 2.5, "'num_hidden_layers' must be an integer, got 2.5"},
      {"num_attention_heads", 0, "'num_attention_heads' must be positive, got 0"},
      {"rms_norm_eps", "tiny", "'rms_norm_eps' must be a number"},
      {"tie_word_embeddings", "yes", "'tie_word_embeddings' must be true or false"},
      {"model_type", 7, "'model_type' must be a string"},
      {"hidden_act", "gelu", "hidden_act 'gelu' is not supported"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    json doc = llama();
    doc[c.key] = c.value;
    expect_config_error(doc, c.message);
  }
}

TEST(ConfigErrors, HeadsNotAMultipleOfKvHeads) {
  json doc = llama();
  doc["num_key_value_heads"] = 3;
  expect_config_error(doc, "num_attention_heads 8 is not a multiple of num_key_value_heads 3");
}

TEST(ConfigErrors, NotAnObject) { expect_config_error(json::array({1, 2}), "not a JSON object"); }

TEST(ConfigLoad, GoldenTinyLlama) {
  const auto dir = e3::test::golden_case("tiny_llama_default");
  const ModelConfig c = e3::model::load_model_config(dir);
  EXPECT_EQ(c.source, dir / "config.json");
  EXPECT_STREQ(family_name(c.family), "llama");
  EXPECT_EQ(c.num_hidden_layers, 8);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.rope.type, "default");  // rope_scaling is null
  EXPECT_EQ(c.fingerprint.size(), 16u);
  EXPECT_EQ(e3::model::load_model_config(dir).fingerprint, c.fingerprint);
}

TEST(ConfigLoad, MissingFile) {
  e3::test::TempDir dir;
  auto err = error_of([&] { e3::model::load_model_config(dir.path()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), (dir / "config.json").string()));
}

TEST(ConfigLoad, InvalidJson) {
  e3::test::TempDir dir;
  e3::test::write_text(dir / "config.json", "{\"hidden_size\": 12,");
  auto err = error_of([&] { e3::model::load_model_config(dir.path()); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), (dir / "config.json").string()));
  EXPECT_TRUE(Contains(err->what(), "invalid JSON"));
}

// ---------------------------------------------------------------------------------------------
// RoPE parameters as HF standardises them

TEST(ConfigRope, RopeScalingWinsOverRopeParameters) {
  json doc = llama();
  doc["rope_theta"] = 1e6;
  doc["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  doc["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 5e4}};
  const RopeConfig r = rope_of(doc);
  EXPECT_EQ(r.type, "linear");
  EXPECT_DOUBLE_EQ(r.factor, 2.0);
  EXPECT_DOUBLE_EQ(r.theta, 1e6);  // rope_scaling has no theta, so the top level's
}

TEST(ConfigRope, EmptyOrNullRopeScalingFallsBackToRopeParameters) {
  for (const json& scaling : {json::object(), json(nullptr)}) {
    SCOPED_TRACE(scaling.dump());
    json doc = llama();
    doc["rope_theta"] = 1e6;
    doc["rope_scaling"] = scaling;
    doc["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 3.0}, {"rope_theta", 5e4}};
    const RopeConfig r = rope_of(doc);
    EXPECT_EQ(r.type, "linear");
    EXPECT_DOUBLE_EQ(r.factor, 3.0);
    EXPECT_DOUBLE_EQ(r.theta, 5e4);  // inside rope_parameters wins over the top level
  }
}

TEST(ConfigRope, ThetaDefaultsTo10000) {
  json doc = llama();
  doc.erase("rope_theta");
  EXPECT_DOUBLE_EQ(rope_of(doc).theta, 10000.0);
}

TEST(ConfigRope, TypeAndRopeType) {
  json doc = llama();
  doc["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(rope_of(doc).type, "linear");

  doc["rope_scaling"] = {{"rope_type", "linear"}, {"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_EQ(rope_of(doc).type, "linear");
}

TEST(ConfigRope, YarnDefaults) {
  json doc = llama();
  doc["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 2048}};
  const RopeConfig r = rope_of(doc);
  EXPECT_EQ(r.type, "yarn");
  EXPECT_DOUBLE_EQ(r.factor, 4.0);
  EXPECT_EQ(r.original_max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(r.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(r.beta_slow, 1.0);
  EXPECT_TRUE(r.truncate);
  EXPECT_FALSE(r.attention_factor.has_value());
  EXPECT_FALSE(r.mscale.has_value());
  EXPECT_FALSE(r.mscale_all_dim.has_value());
}

TEST(ConfigRope, YarnExplicitParameters) {
  json doc = llama();
  doc["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 8.0},        {"original_max_position_embeddings", 32},
                            {"beta_fast", 16.0},   {"beta_slow", 2.0},     {"mscale", 1.0},
                            {"mscale_all_dim", 0.5}, {"truncate", false}};
  const RopeConfig r = rope_of(doc);
  EXPECT_DOUBLE_EQ(r.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(r.beta_slow, 2.0);
  EXPECT_FALSE(r.truncate);
  ASSERT_TRUE(r.mscale.has_value());
  EXPECT_DOUBLE_EQ(*r.mscale, 1.0);
  ASSERT_TRUE(r.mscale_all_dim.has_value());
  EXPECT_DOUBLE_EQ(*r.mscale_all_dim, 0.5);
}

TEST(ConfigRope, YarnFactorFromPositionsWhenAbsent) {
  json doc = llama();  // max_position_embeddings 8192
  doc["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 2048}};
  const RopeConfig r = rope_of(doc);
  EXPECT_EQ(r.original_max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(r.factor, 4.0);
}

TEST(ConfigRope, TopLevelOriginalMaxPositionsWins) {
  json doc = llama();
  doc["original_max_position_embeddings"] = 1024;
  doc["rope_scaling"] = {{"rope_type", "yarn"}, {"original_max_position_embeddings", 2048}};
  const RopeConfig r = rope_of(doc);
  EXPECT_EQ(r.original_max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(r.factor, 8.0);
}

TEST(ConfigRope, Llama3Parameters) {
  json doc = llama();
  doc["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  const RopeConfig r = rope_of(doc);
  EXPECT_EQ(r.type, "llama3");
  EXPECT_DOUBLE_EQ(r.factor, 8.0);
  EXPECT_DOUBLE_EQ(r.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(r.high_freq_factor, 4.0);
  EXPECT_EQ(r.original_max_position_embeddings, 8192);
}

TEST(ConfigRope, DynamicIsUnsupported) {
  json doc = llama();
  doc["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expect_config_error(doc, "RoPE type 'dynamic' is not supported");
}

TEST(ConfigRope, LinearNeedsFactor) {
  json doc = llama();
  doc["rope_scaling"] = {{"rope_type", "linear"}};
  expect_config_error(doc, "linear RoPE needs a positive 'factor'");
}

// ---------------------------------------------------------------------------------------------
// Tensor parallelism and capture ids

ModelConfig shape(int64_t heads, int64_t kv_heads, int64_t intermediate, int64_t layers = 32) {
  ModelConfig c;
  c.source = kSource;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  return c;
}

void expect_tp_error(const ModelConfig& c, int tp, const std::string& part) {
  auto err = error_of([&] { check_tensor_parallel(c, tp); });
  ASSERT_TRUE(err.has_value()) << "tp " << tp << " accepted";
  EXPECT_EQ(err->kind(), ErrorKind::Model);
  EXPECT_TRUE(Contains(err->what(), kSource.string()));
  EXPECT_TRUE(Contains(err->what(), part));
}

TEST(ConfigTensorParallel, AcceptsSplittableModels) {
  EXPECT_NO_THROW(check_tensor_parallel(shape(8, 4, 512), 1));
  EXPECT_NO_THROW(check_tensor_parallel(shape(8, 4, 512), 2));
  EXPECT_NO_THROW(check_tensor_parallel(shape(8, 4, 512), 4));
  EXPECT_NO_THROW(check_tensor_parallel(shape(8, 4, 512), 8));  // kv heads replicated
  EXPECT_NO_THROW(check_tensor_parallel(shape(8, 1, 512), 4));
}

TEST(ConfigTensorParallel, HeadsNotDivisible) {
  expect_tp_error(shape(8, 4, 512), 3, "num_attention_heads 8 is not divisible by --tp 3");
}

TEST(ConfigTensorParallel, KvHeadsNeitherDivideNorDivisible) {
  expect_tp_error(shape(12, 2, 512), 3, "num_key_value_heads 2 neither divides nor is divisible by --tp 3");
  expect_tp_error(shape(24, 6, 512), 4, "num_key_value_heads 6 neither divides nor is divisible by --tp 4");
}

TEST(ConfigTensorParallel, IntermediateNotDivisible) {
  expect_tp_error(shape(8, 4, 500), 8, "intermediate_size 500 is not divisible by --tp 8");
}

TEST(ConfigCaptureIds, DefaultIsTwoHalfAndThirdFromLast) {
  EXPECT_EQ(default_capture_ids(shape(8, 4, 512, 32)), (std::vector<int>{2, 16, 29}));
  EXPECT_EQ(default_capture_ids(shape(8, 4, 512, 8)), (std::vector<int>{2, 4, 5}));
  EXPECT_EQ(default_capture_ids(shape(8, 4, 512, 7)), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(default_capture_ids(shape(8, 4, 512, 4)), (std::vector<int>{2, 2, 1}));
}

TEST(ConfigCaptureIds, TooFewLayers) {
  for (int64_t layers : {1, 2, 3}) {
    SCOPED_TRACE(layers);
    auto err = error_of([&] { default_capture_ids(shape(8, 4, 512, layers)); });
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->kind(), ErrorKind::Usage);
    EXPECT_TRUE(Contains(err->what(), "--layers"));
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE frequencies

double expected_default(double theta, int i, int dim) { return 1.0 / std::pow(theta, 2.0 * i / dim); }

RopeConfig rope(const std::string& type, double theta = 10000.0) {
  RopeConfig r;
  r.type = type;
  r.theta = theta;
  return r;
}

TEST(RopeMath, DefaultMatchesFormula) {
  const RopeFrequencies f = compute_rope_frequencies(rope("default"), 64, 4096);
  EXPECT_EQ(f.rot_dim, 64);
  EXPECT_FLOAT_EQ(f.attention_factor, 1.0f);
  ASSERT_EQ(f.inv_freq.size(), 32u);
  EXPECT_EQ(f.inv_freq[0], 1.0f);
  for (int i = 0; i < 32; ++i) {
    const double want = expected_default(10000.0, i, 64);
    EXPECT_NEAR(f.inv_freq[static_cast<size_t>(i)], want, 1e-6 * want) << "i = " << i;
  }
}

TEST(RopeMath, PartialRotaryFactorShrinksRotatedDim) {
  RopeConfig r = rope("default", 1e6);
  r.partial_rotary_factor = 0.5;
  const RopeFrequencies f = compute_rope_frequencies(r, 128, 4096);
  EXPECT_EQ(f.rot_dim, 64);
  ASSERT_EQ(f.inv_freq.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double want = expected_default(1e6, i, 64);
    EXPECT_NEAR(f.inv_freq[static_cast<size_t>(i)], want, 1e-6 * want) << "i = " << i;
  }
}

TEST(RopeMath, OddRotatedDimIsRejected) {
  auto err = error_of([&] { compute_rope_frequencies(rope("default"), 63, 4096); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), ErrorKind::Model);
}

TEST(RopeMath, LinearDividesByFactor) {
  const RopeFrequencies base = compute_rope_frequencies(rope("default"), 64, 4096);
  RopeConfig r = rope("linear");
  r.factor = 4.0;
  const RopeFrequencies f = compute_rope_frequencies(r, 64, 4096);
  ASSERT_EQ(f.inv_freq.size(), base.inv_freq.size());
  EXPECT_FLOAT_EQ(f.attention_factor, 1.0f);
  for (size_t i = 0; i < f.inv_freq.size(); ++i)
    EXPECT_NEAR(f.inv_freq[i], base.inv_freq[i] / 4.0, 1e-6 * base.inv_freq[i] / 4.0) << "i = " << i;
}

TEST(RopeMath, YarnGetMscale) {
  EXPECT_DOUBLE_EQ(yarn_get_mscale(1.0, 5.0), 1.0);
  EXPECT_DOUBLE_EQ(yarn_get_mscale(0.5, 5.0), 1.0);
  EXPECT_DOUBLE_EQ(yarn_get_mscale(4.0, 1.0), 0.1 * std::log(4.0) + 1.0);
  EXPECT_DOUBLE_EQ(yarn_get_mscale(40.0, 0.707), 0.1 * 0.707 * std::log(40.0) + 1.0);
}

RopeConfig yarn(double factor) {
  RopeConfig r = rope("yarn");
  r.factor = factor;
  r.original_max_position_embeddings = 4096;
  return r;
}

TEST(RopeMath, YarnAttentionFactorWithoutMscale) {
  const RopeFrequencies f = compute_rope_frequencies(yarn(4.0), 64, 16384);
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-6);
}

TEST(RopeMath, YarnAttentionFactorFromBothMscales) {
  RopeConfig r = yarn(40.0);
  r.mscale = 1.0;
  r.mscale_all_dim = 0.707;
  const RopeFrequencies f = compute_rope_frequencies(r, 64, 4096 * 40);
  const double want = yarn_get_mscale(40.0, 1.0) / yarn_get_mscale(40.0, 0.707);
  EXPECT_NEAR(f.attention_factor, want, 1e-6);
  EXPECT_GT(f.attention_factor, 1.0f);  // guards against the ratio being taken upside down
}

TEST(RopeMath, YarnExplicitAttentionFactorWins) {
  RopeConfig r = yarn(4.0);
  r.attention_factor = 0.75;
  r.mscale = 1.0;
  r.mscale_all_dim = 0.5;
  EXPECT_FLOAT_EQ(compute_rope_frequencies(r, 64, 16384).attention_factor, 0.75f);
}

TEST(RopeMath, YarnKeepsHighAndInterpolatesLowFrequencies) {
  // dim 64, theta 1e4, 4096 original positions, betas 32/1: the ramp runs over i in [10, 23].
  const RopeFrequencies base = compute_rope_frequencies(rope("default"), 64, 4096);
  const RopeFrequencies f = compute_rope_frequencies(yarn(4.0), 64, 16384);
  ASSERT_EQ(f.inv_freq.size(), 32u);
  for (size_t i = 0; i <= 10; ++i) EXPECT_NEAR(f.inv_freq[i], base.inv_freq[i], 1e-6 * base.inv_freq[i]) << i;
  for (size_t i = 23; i < 32; ++i)
    EXPECT_NEAR(f.inv_freq[i], base.inv_freq[i] / 4.0, 1e-6 * base.inv_freq[i]) << i;
  for (size_t i = 11; i < 23; ++i) {
    EXPECT_LT(f.inv_freq[i], base.inv_freq[i]) << i;
    EXPECT_GT(f.inv_freq[i], base.inv_freq[i] / 4.0f) << i;
  }
}

TEST(RopeMath, Llama3KeepsHighAndDividesLowFrequencies) {
  const double theta = 500000.0;
  RopeConfig r = rope("llama3", theta);
  r.factor = 8.0;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position_embeddings = 8192;
  const RopeFrequencies base = compute_rope_frequencies(rope("default", theta), 128, 131072);
  const RopeFrequencies f = compute_rope_frequencies(r, 128, 131072);
  ASSERT_EQ(f.inv_freq.size(), base.inv_freq.size());

  const double high_wavelen = 8192.0 / 4.0, low_wavelen = 8192.0 / 1.0;
  int high = 0, low = 0, medium = 0;
  for (size_t i = 0; i < f.inv_freq.size(); ++i) {
    const double wavelen = 2.0 * M_PI / base.inv_freq[i];
    if (wavelen < high_wavelen) {
      ++high;
      EXPECT_EQ(f.inv_freq[i], base.inv_freq[i]) << i;
    } else if (wavelen > low_wavelen) {
      ++low;
      EXPECT_NEAR(f.inv_freq[i], base.inv_freq[i] / 8.0, 1e-6 * base.inv_freq[i] / 8.0) << i;
    } else {
      ++medium;
      EXPECT_LT(f.inv_freq[i], base.inv_freq[i]) << i;
      EXPECT_GT(f.inv_freq[i], base.inv_freq[i] / 8.0f) << i;
    }
  }
  // All three bands must be exercised for the checks above to mean anything.
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

}  // namespace
