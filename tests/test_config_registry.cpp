// The architecture registry: each family is found by every name its descriptor lists, no name
// selects two families, every family's decoder builds from a tiny config with exactly the
// tensors its descriptor names (under its own names and under a renamed table) and runs a
// step, and messages list the registry's families and the router name tables rather than a
// copy of them.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/backend.h"
#include "model/arch.h"
#include "model/config.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "support/host_capture.h"
#include "support/test_support.h"

namespace {

using e3::model::arch_registry;
using e3::model::ArchDescriptor;
using e3::model::AttentionKind;
using e3::model::expert_name;
using e3::model::find_arch;
using e3::model::layer_name;
using e3::model::ModelConfig;
using e3::model::TensorNames;
using e3::test::Contains;
using e3::test::error_of;
using nlohmann::json;

TEST(ArchRegistry, EveryNameFindsItsFamilyAndNoOther) {
  std::set<std::string_view> architectures, model_types, families;
  ASSERT_GE(arch_registry().size(), 8u);
  for (const ArchDescriptor& a : arch_registry()) {
    SCOPED_TRACE(a.family);
    EXPECT_TRUE(families.insert(a.family).second) << "two families named " << a.family;
    EXPECT_NE(a.parse, nullptr);
    EXPECT_NE(a.names, nullptr);
    EXPECT_FALSE(a.architectures.empty());
    EXPECT_FALSE(a.model_types.empty());
    for (std::string_view n : a.architectures) {
      EXPECT_TRUE(architectures.insert(n).second) << n << " selects two families";
      EXPECT_EQ(find_arch(n, ""), &a) << n;
      EXPECT_EQ(find_arch(n, "unknown"), &a) << n;
    }
    for (std::string_view t : a.model_types) {
      EXPECT_TRUE(model_types.insert(t).second) << t << " selects two families";
      EXPECT_EQ(find_arch("", t), &a) << t;
      EXPECT_EQ(find_arch("SomethingForCausalLM", t), &a) << t;
    }
  }
  EXPECT_EQ(find_arch("GPT2LMHeadModel", "gpt2"), nullptr);
  EXPECT_TRUE(families.count("glm4_moe"));
}

TEST(ArchRegistry, UnsupportedArchitectureListsEveryFamily) {
  const json doc = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"hidden_size", 64}};
  auto err = error_of([&] { e3::model::parse_model_config(doc, "/m/config.json"); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->kind(), e3::ErrorKind::Model);
  for (const ArchDescriptor& a : arch_registry()) EXPECT_TRUE(Contains(err->what(), a.family)) << err->what();
  EXPECT_TRUE(Contains(err->what(), "deepseek_v3 (kimi_k2)")) << err->what();
}

// ---------------------------------------------------------------------------------------------
// Every family's decoder, built from a tiny config and run for one step on the CPU backend

// The same roles as HF's names under other names (GGUF's style), so that a name the builder or
// the checkpoint check spelled themselves instead of taking it from the descriptor shows.
constexpr TensorNames kRenamed{
    "token_embd.weight",
    "output_norm.weight",
    "blk.{}.attn_norm.weight",
    "blk.{}.ffn_norm.weight",
    "blk.{}.attn_q",
    "blk.{}.attn_k",
    "blk.{}.attn_v",
    "blk.{}.attn_output",
    "blk.{}.attn_q_norm.weight",
    "blk.{}.attn_k_norm.weight",
    "blk.{}.attn_q_a",
    "blk.{}.attn_q_a_norm",
    "blk.{}.attn_q_b",
    "blk.{}.attn_kv_a_mqa",
    "blk.{}.attn_kv_a_norm",
    "blk.{}.attn_kv_b",
    "blk.{}.ffn_gate",
    "blk.{}.ffn_up",
    "blk.{}.ffn_down",
    "blk.{}.ffn_gate_inp.weight",
    "blk.{}.exp_probs_b.bias",
    "blk.{}.ffn_gate_exps.{{}}",
    "blk.{}.ffn_up_exps.{{}}",
    "blk.{}.ffn_down_exps.{{}}",
    "blk.{}.ffn_gate_shexp",
    "blk.{}.ffn_up_shexp",
    "blk.{}.ffn_down_shexp",
};

// A family's tiny config: three layers of width 64; MoE families get four experts with the
// first layer dense, MLA families their ranks; biases and q/k norms where the family reads them.
json tiny_config(const ArchDescriptor& a) {
  json d = {{"architectures", {std::string(a.architectures.front())}},
            {"model_type", std::string(a.model_types.front())},
            {"hidden_size", 64},
            {"intermediate_size", 96},
            {"num_hidden_layers", 3},
            {"num_attention_heads", 4},
            {"num_key_value_heads", 2},
            {"head_dim", 16},
            {"vocab_size", 40},
            {"max_position_embeddings", 64},
            {a.experts_key, 4},
            {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 32},
            {"n_shared_experts", 1},
            {"first_k_dense_replace", 1},
            {"mlp_only_layers", {0}},
            {"attention_bias", true},
            {"use_qk_norm", true}};
  if (a.attention == AttentionKind::Mla) {
    d["q_lora_rank"] = 24;
    d["kv_lora_rank"] = 16;
    d["qk_nope_head_dim"] = 16;
    d["qk_rope_head_dim"] = 8;
    d["v_head_dim"] = 12;
  }
  return d;
}

// The tensors the descriptor's names and the config's shapes call for, and no other.
std::vector<e3::test::StTensor> expected_tensors(const ModelConfig& c, const TensorNames& n) {
  const int64_t H = c.hidden_size, heads = c.num_attention_heads;
  std::vector<e3::test::StTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    const auto values = e3::test::random_floats(static_cast<size_t>(count), t.size() + 1);
    t.push_back({std::move(name), "F32", std::move(shape), e3::test::f32_bytes(values)});
  };
  auto linear = [&](const std::string& base, int64_t rows, int64_t cols, bool bias) {
    add(base + ".weight", {rows, cols});
    if (bias) add(base + ".bias", {rows});
  };
  add(n.embed, {c.vocab_size, H});
  add(n.final_norm, {H});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    auto at = [&](const char* pattern) { return layer_name(pattern, l); };
    add(at(n.input_norm), {H});
    add(at(n.post_attention_norm), {H});
    if (c.is_mla()) {
      const e3::model::MlaConfig& m = c.mla;
      const int64_t qk = m.qk_head_dim();
      if (m.q_lora_rank > 0) {
        linear(at(n.q_a), m.q_lora_rank, H, m.attention_bias);
        add(at(n.q_a_norm) + ".weight", {m.q_lora_rank});
        linear(at(n.q_b), heads * qk, m.q_lora_rank, false);
      } else {
        linear(at(n.q), heads * qk, H, false);
      }
      linear(at(n.kv_a), m.kv_lora_rank + m.qk_rope_head_dim, H, m.attention_bias);
      add(at(n.kv_a_norm) + ".weight", {m.kv_lora_rank});
      linear(at(n.kv_b), heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, false);
      linear(at(n.o), H, heads * m.v_head_dim, m.attention_bias);
    } else {
      const int64_t hd = c.head_dim, kv = c.num_key_value_heads;
      linear(at(n.q), heads * hd, H, c.qkv_bias);
      linear(at(n.k), kv * hd, H, c.qkv_bias);
      linear(at(n.v), kv * hd, H, c.qkv_bias);
      linear(at(n.o), H, heads * hd, c.o_bias);
      if (c.qk_norm) {
        add(at(n.q_norm), {hd});
        add(at(n.k_norm), {hd});
      }
    }
    const e3::model::MoeConfig& moe = c.moe;
    if (moe.num_experts > 0 && moe.layer_is_moe[static_cast<size_t>(l)]) {
      const int64_t I = moe.moe_intermediate_size, shared = I * moe.n_shared_experts;
      add(at(n.router), {moe.num_experts, H});
      if (moe.has_correction_bias()) add(at(n.correction_bias), {moe.num_experts});
      for (int64_t e = 0; e < moe.num_experts; ++e) {
        linear(expert_name(n.expert_gate, l, e), I, H, false);
        linear(expert_name(n.expert_up, l, e), I, H, false);
        linear(expert_name(n.expert_down, l, e), H, I, false);
      }
      if (shared > 0) {
        linear(at(n.shared_gate), shared, H, false);
        linear(at(n.shared_up), shared, H, false);
        linear(at(n.shared_down), H, shared, false);
      }
    } else {
      linear(at(n.gate), c.intermediate_size, H, c.mlp_bias);
      linear(at(n.up), c.intermediate_size, H, c.mlp_bias);
      linear(at(n.down), H, c.intermediate_size, c.mlp_bias);
    }
  }
  return t;
}

// A group of one rank: the sum over it is the tensor itself.
class SoloCommunicator final : public e3::parallel::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "solo"; }
  void all_reduce_sum(e3::kernels::Tensor) override {}
};

// Loads the checkpoint of exactly `c`'s tensors under `names` and runs one step of two
// sequences; every state captured must be finite, of shape [tokens, hidden_size], and the
// loader must have read each tensor once.
void build_and_step(const ModelConfig& c, const TensorNames& names) {
  e3::test::TempDir dir;
  const std::vector<e3::test::StTensor> tensors = expected_tensors(c, names);
  uint64_t bytes = 0;
  for (const auto& t : tensors) bytes += t.bytes.size();
  e3::test::write_safetensors(dir / "model.safetensors", tensors);
  const e3::model::Checkpoint ckpt(dir.path());

  constexpr int64_t kMaxTokens = 8;
  auto backend = e3::kernels::make_cpu_backend(1);
  SoloCommunicator comm;
  const auto model = e3::model::load_model(c, ckpt, *backend, comm, {0, 1, kMaxTokens, kMaxTokens});
  EXPECT_EQ(ckpt.bytes_read(), bytes) << "the decoder did not read each of its tensors once";

  e3::model::HostBatch batch;
  batch.clear();
  const std::vector<int32_t> first = {1, 7, 39}, second = {0, 22};
  batch.add_sequence(first.data(), static_cast<int64_t>(first.size()));
  batch.add_sequence(second.data(), static_cast<int64_t>(second.size()));
  const int64_t M = batch.num_tokens(), H = c.hidden_size;
  const std::vector<int> ids = {0, 1, 2};
  e3::test::HostCapture capture(*backend, ids, e3::model::FinalMode::Both, H, kMaxTokens);
  capture.begin_step(M);
  model->forward(batch, &capture);
  capture.audit(0);  // each id and final state captured once, [tokens, hidden_size]

  std::vector<const float*> states;
  for (size_t k = 0; k < ids.size(); ++k) states.push_back(capture.layer(k));
  states.push_back(capture.final_state(e3::model::FinalNorm::Pre));
  states.push_back(capture.final_state(e3::model::FinalNorm::Post));
  for (size_t s = 0; s < states.size(); ++s) {
    ASSERT_NE(states[s], nullptr) << "state " << s;
    double norm = 0;
    for (int64_t i = 0; i < M * H; ++i) {
      ASSERT_TRUE(std::isfinite(states[s][i])) << "state " << s << ", element " << i;
      norm += std::fabs(states[s][i]);
    }
    EXPECT_GT(norm, 0) << "state " << s << " is all zero";
  }
  // The layers changed the residual stream: layer 2's output is not the embedding.
  EXPECT_NE(std::vector<float>(states[0], states[0] + M * H), std::vector<float>(states[2], states[2] + M * H));
}

TEST(ArchRegistry, EveryFamilyBuildsItsDecoderFromItsNamesAndRunsAStep) {
  bool saw_mla = false, saw_gqa = false, saw_moe = false;
  for (const ArchDescriptor& a : arch_registry()) {
    SCOPED_TRACE(a.family);
    const ModelConfig c = e3::model::parse_model_config(tiny_config(a), "/tiny/config.json");
    ASSERT_EQ(c.family, &a);
    ASSERT_EQ(c.attention, a.attention);
    saw_mla = saw_mla || c.is_mla();
    saw_gqa = saw_gqa || !c.is_mla();
    saw_moe = saw_moe || c.moe.num_experts > 0;
    EXPECT_NO_THROW(build_and_step(c, *a.names)) << "under the family's own names";
    // The same family under other names: nothing of the build may spell a name itself.
    ArchDescriptor renamed = a;
    renamed.names = &kRenamed;
    ModelConfig rc = c;
    rc.family = &renamed;
    EXPECT_NO_THROW(build_and_step(rc, kRenamed)) << "under renamed tensors";
  }
  EXPECT_TRUE(saw_mla && saw_gqa && saw_moe) << "the registry no longer covers both attention kinds and MoE";
}

TEST(RouterNames, EachTableRoundTripsAndListsItsNames) {
  using e3::model::Scoring;
  using e3::model::TopkMethod;
  for (const auto& [value, name] : e3::kernels::kScoringNames) {
    EXPECT_EQ(e3::value_named<Scoring>(name), value);
    EXPECT_EQ(e3::name_of(value), name);
  }
  for (const auto& [value, name] : e3::kernels::kTopkMethodNames) {
    EXPECT_EQ(e3::value_named<TopkMethod>(name), value);
    EXPECT_EQ(e3::name_of(value), name);
  }
  EXPECT_FALSE(e3::value_named<TopkMethod>("random").has_value());
  EXPECT_EQ((e3::joined_names<TopkMethod>(", ", ", ")), "greedy, group_limited_greedy, noaux_tc");
  EXPECT_EQ((e3::joined_names<Scoring>(", ", ", ")), "softmax, sigmoid");
}

}  // namespace
