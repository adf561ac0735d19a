// The MoE router on hand-made scores: greedy, DeepSeek-V2's group-limited greedy, DeepSeek-V3's
// noaux_tc with its correction bias, ties, normalisation and scaling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "kernels/ops_cpu.h"

namespace e3::kernels {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// Routes one token. `probs` are the scores the router should see: turned into logits whose
// sigmoid (or softmax) gives them back.
Routed route(const std::vector<float>& probs, RouterParams p, const std::vector<float>* bias = nullptr) {
  const int E = static_cast<int>(probs.size());
  p.num_experts = E;
  std::vector<float> logits(probs.size());
  for (size_t e = 0; e < probs.size(); ++e)
    logits[e] = p.scoring == RouterScoring::Sigmoid ? std::log(probs[e] / (1 - probs[e])) : std::log(probs[e]);
  Routed r;
  r.ids.assign(static_cast<size_t>(p.top_k), -1);
  r.weights.assign(static_cast<size_t>(p.top_k), -1.0f);
  Tensor b;
  if (bias) b = Tensor(const_cast<float*>(bias->data()), DType::F32, 1, E);
  cpu::moe_route(Tensor(logits.data(), DType::F32, 1, E), bias ? &b : nullptr, p,
                 Tensor(r.ids.data(), DType::I32, 1, p.top_k), Tensor(r.weights.data(), DType::F32, 1, p.top_k));
  return r;
}

std::set<int32_t> id_set(const Routed& r) { return {r.ids.begin(), r.ids.end()}; }

float weight_of(const Routed& r, int32_t id) {
  for (size_t j = 0; j < r.ids.size(); ++j)
    if (r.ids[j] == id) return r.weights[j];
  ADD_FAILURE() << "expert " << id << " not routed";
  return NAN;
}

RouterParams params(int top_k, RouterScoring scoring, RouterSelect select) {
  RouterParams p;
  p.top_k = top_k;
  p.scoring = scoring;
  p.select = select;
  return p;
}

TEST(Router, GreedyTakesTheLargestScoresWithTheirWeights) {
  // Softmax probabilities of 6 experts (they sum to 1).
  const std::vector<float> probs{0.05f, 0.30f, 0.10f, 0.25f, 0.20f, 0.10f};
  RouterParams p = params(3, RouterScoring::Softmax, RouterSelect::Greedy);
  p.routed_scaling_factor = 2.0f;
  const Routed r = route(probs, p);
  EXPECT_EQ(id_set(r), (std::set<int32_t>{1, 3, 4}));
  EXPECT_NEAR(weight_of(r, 1), 0.60f, 1e-6);  // scaled, not normalised
  EXPECT_NEAR(weight_of(r, 3), 0.50f, 1e-6);
  EXPECT_NEAR(weight_of(r, 4), 0.40f, 1e-6);
}

TEST(Router, NormTopkProbNormalisesBeforeScaling) {
  const std::vector<float> probs{0.05f, 0.30f, 0.10f, 0.25f, 0.20f, 0.10f};
  RouterParams p = params(2, RouterScoring::Softmax, RouterSelect::Greedy);
  p.norm_topk_prob = true;
  p.routed_scaling_factor = 3.0f;
  const Routed r = route(probs, p);
  EXPECT_NEAR(weight_of(r, 1), 3.0f * 0.30f / 0.55f, 1e-5);
  EXPECT_NEAR(weight_of(r, 3), 3.0f * 0.25f / 0.55f, 1e-5);
}

TEST(Router, TiesGoToTheLowerExpertId) {
  const std::vector<float> probs{0.1f, 0.2f, 0.2f, 0.2f, 0.3f};
  const Routed r = route(probs, params(2, RouterScoring::Softmax, RouterSelect::Greedy));
  EXPECT_EQ(id_set(r), (std::set<int32_t>{4, 1}));
}

TEST(Router, SigmoidScoresAreIndependentPerExpert) {
  const std::vector<float> probs{0.9f, 0.8f, 0.1f, 0.7f};
  RouterParams p = params(2, RouterScoring::Sigmoid, RouterSelect::Greedy);
  const Routed r = route(probs, p);
  EXPECT_EQ(id_set(r), (std::set<int32_t>{0, 1}));
  EXPECT_NEAR(weight_of(r, 0), 0.9f, 1e-6);
  EXPECT_NEAR(weight_of(r, 1), 0.8f, 1e-6);
}

TEST(Router, GroupLimitedGreedyRanksGroupsByTheirBestScore) {
  // Two groups of two. Greedy would take experts 0 and 2; the best group is group 0 (0.40 >
  // 0.30), so both experts come from it, expert 1 with its small score.
  const std::vector<float> probs{0.40f, 0.05f, 0.30f, 0.25f};
  RouterParams p = params(2, RouterScoring::Softmax, RouterSelect::GroupLimitedGreedy);
  p.n_group = 2;
  p.topk_group = 1;
  const Routed r = route(probs, p);
  EXPECT_EQ(id_set(r), (std::set<int32_t>{0, 1}));
  EXPECT_NEAR(weight_of(r, 1), 0.05f, 1e-6);
  const Routed greedy = route(probs, params(2, RouterScoring::Softmax, RouterSelect::Greedy));
  EXPECT_EQ(id_set(greedy), (std::set<int32_t>{0, 2}));
}

TEST(Router, NoauxTcRanksGroupsByTheSumOfTheirTwoBestChoices) {
  // Four groups of two. Group 0 holds the single best expert (0.95) but its pair sums to 0.96;
  // groups 1 (1.2) and 2 (1.05) win, so expert 0 is never chosen.
  const std::vector<float> probs{0.95f, 0.01f, 0.60f, 0.59f, 0.55f, 0.50f, 0.10f, 0.10f};
  const std::vector<float> zero(8, 0.0f);
  RouterParams p = params(3, RouterScoring::Sigmoid, RouterSelect::NoAuxTc);
  p.n_group = 4;
  p.topk_group = 2;
  const Routed r = route(probs, p, &zero);
  EXPECT_EQ(id_set(r), (std::set<int32_t>{2, 3, 4}));
  // With every group allowed, expert 0 is in.
  p.topk_group = 4;
  EXPECT_EQ(id_set(route(probs, p, &zero)), (std::set<int32_t>{0, 2, 3}));
}

TEST(Router, CorrectionBiasChangesTheChoiceButNotTheWeights) {
  const std::vector<float> probs{0.6f, 0.5f, 0.2f, 0.1f};
  const std::vector<float> bias{0.0f, 0.2f, 0.0f, 0.45f};  // choices 0.6, 0.7, 0.2, 0.55
  RouterParams p = params(2, RouterScoring::Sigmoid, RouterSelect::NoAuxTc);
  p.routed_scaling_factor = 2.5f;
  const Routed r = route(probs, p, &bias);
  EXPECT_EQ(id_set(r), (std::set<int32_t>{1, 0}));
  EXPECT_NEAR(weight_of(r, 1), 2.5f * 0.5f, 1e-5);  // the score, not score + bias
  EXPECT_NEAR(weight_of(r, 0), 2.5f * 0.6f, 1e-5);
  // The bias alone can bring in an expert whose own score is low; its weight stays low.
  const std::vector<float> big{0.0f, 0.0f, 0.0f, 1.0f};
  p.norm_topk_prob = true;
  const Routed b = route(probs, p, &big);
  EXPECT_EQ(id_set(b), (std::set<int32_t>{3, 0}));
  EXPECT_NEAR(weight_of(b, 3), 2.5f * 0.1f / 0.7f, 1e-5);
  EXPECT_NEAR(weight_of(b, 0), 2.5f * 0.6f / 0.7f, 1e-5);
}

TEST(Router, NoauxTcGroupsUseTheBiasedChoices) {
  // Without the bias group 0 wins (0.9 + 0.8 vs 0.5 + 0.5); the bias lifts group 1.
  const std::vector<float> probs{0.9f, 0.8f, 0.5f, 0.5f};
  const std::vector<float> bias{0.0f, 0.0f, 0.5f, 0.5f};
  RouterParams p = params(1, RouterScoring::Sigmoid, RouterSelect::NoAuxTc);
  p.n_group = 2;
  p.topk_group = 1;
  const std::vector<float> zero(4, 0.0f);
  EXPECT_EQ(route(probs, p, &zero).ids[0], 0);
  const Routed r = route(probs, p, &bias);
  EXPECT_EQ(r.ids[0], 2);  // 1.0 vs 1.0 inside group 1: the lower id
  EXPECT_NEAR(r.weights[0], 0.5f, 1e-6);
}

TEST(Router, EveryTokenIsRoutedIndependently) {
  // Two tokens in one call route differently.
  RouterParams p = params(1, RouterScoring::Softmax, RouterSelect::Greedy);
  p.num_experts = 3;
  std::vector<float> logits{0.0f, 5.0f, 1.0f, 3.0f, 0.0f, 0.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  cpu::moe_route(Tensor(logits.data(), DType::F32, 2, 3), nullptr, p, Tensor(ids.data(), DType::I32, 2, 1),
                 Tensor(w.data(), DType::F32, 2, 1));
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(w[0], std::exp(5.0f) / (1 + std::exp(5.0f) + std::exp(1.0f)), 1e-6);
}

}  // namespace
}  // namespace e3::kernels
