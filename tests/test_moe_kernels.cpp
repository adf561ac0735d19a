// The CPU MoE expert op and the MLA key/value expansion, checked against naive formulas
// written independently of the implementation (double precision for the experts, element
// by element for the copies).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/ops_cpu.h"
#include "support/test_support.h"

namespace {

using e3::DType;
using e3::kernels::ExpertStack;
using e3::kernels::MoeScratchShape;
using e3::kernels::Tensor;
using e3::test::random_floats;
namespace cpu = e3::kernels::cpu;

constexpr double kTol = 1e-5;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  return rel_err(got, std::vector<double>(want.begin(), want.end()));
}

// ---------------------------------------------------------------- moe_experts

// The routed experts of a whole layer, stacked as ExpertStack expects. A rank's share is a
// row range of these buffers, which is exactly how the loader slices a checkpoint.
struct Experts {
  int64_t E, H, I;
  std::vector<float> gate, up, down;
  std::vector<float> gate_up;  // per expert: its I gate rows, then its I up rows

  Experts(int64_t experts, int64_t hidden, int64_t inter, uint64_t seed)
      : E(experts), H(hidden), I(inter),
        gate(random_floats(static_cast<size_t>(experts * inter * hidden), seed)),
        up(random_floats(static_cast<size_t>(experts * inter * hidden), seed + 1)),
        down(random_floats(static_cast<size_t>(experts * hidden * inter), seed + 2)) {}

  // Local experts [first, first + count) of the layer.
  ExpertStack stack(int first, int count) {
    gate_up.assign(static_cast<size_t>(E * 2 * I * H), 0.0f);
    for (int64_t e = 0; e < E; ++e) {
      std::copy(gate.begin() + e * I * H, gate.begin() + (e + 1) * I * H, gate_up.begin() + 2 * e * I * H);
      std::copy(up.begin() + e * I * H, up.begin() + (e + 1) * I * H, gate_up.begin() + (2 * e + 1) * I * H);
    }
    ExpertStack s;
    s.gate_up = Tensor(gate_up.data(), DType::F32, E * 2 * I, H).row_slice(first * 2 * I, count * 2 * I);
    s.down = Tensor(down.data(), DType::F32, E * H, I).row_slice(first * H, count * H);
    s.first_expert = first;
    s.num_experts = count;
    s.intermediate = I;
    return s;
  }

  // Poisons one expert so that any read of its weights shows up as NaN in the output.
  void poison(int e) {
    std::fill(gate.begin() + e * I * H, gate.begin() + (e + 1) * I * H, kNaN);
    std::fill(up.begin() + e * I * H, up.begin() + (e + 1) * I * H, kNaN);
    std::fill(down.begin() + e * H * I, down.begin() + (e + 1) * H * I, kNaN);
  }
};

// out[t] = sum over slots j whose expert g is in [first, first + count) of
// w[t,j] * down_g(silu(gate_g x_t) * up_g x_t), in double.
std::vector<double> ref_moe(const std::vector<float>& x, const std::vector<int32_t>& ids, const std::vector<float>& w,
                            int64_t M, int64_t K, const Experts& ex, int first, int count) {
  const int64_t H = ex.H, I = ex.I;
  std::vector<double> out(static_cast<size_t>(M * H), 0.0);
  std::vector<double> act(static_cast<size_t>(I));
  for (int64_t t = 0; t < M; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int g = ids[static_cast<size_t>(t * K + j)];
      if (g < first || g >= first + count) continue;
      for (int64_t i = 0; i < I; ++i) {
        double gv = 0.0, uv = 0.0;
        for (int64_t h = 0; h < H; ++h) {
          const double xv = x[static_cast<size_t>(t * H + h)];
          gv += static_cast<double>(ex.gate[static_cast<size_t>((g * I + i) * H + h)]) * xv;
          uv += static_cast<double>(ex.up[static_cast<size_t>((g * I + i) * H + h)]) * xv;
        }
        act[static_cast<size_t>(i)] = gv / (1.0 + std::exp(-gv)) * uv;
      }
      for (int64_t h = 0; h < H; ++h) {
        double d = 0.0;
        for (int64_t i = 0; i < I; ++i)
          d += static_cast<double>(ex.down[static_cast<size_t>((g * H + h) * I + i)]) * act[static_cast<size_t>(i)];
        out[static_cast<size_t>(t * H + h)] += w[static_cast<size_t>(t * K + j)] * d;
      }
    }
  return out;
}

// Runs the op with `out` prefilled by garbage, so that a missing overwrite shows.
// `shared`, if not empty, is the shared experts' [M, H] output that the op adds.
std::vector<float> run_moe(std::vector<float>& x, std::vector<int32_t>& ids, std::vector<float>& w, int64_t M,
                           int64_t K, const ExpertStack& stack, int64_t H, std::vector<float> shared = {}) {
  std::vector<float> out(static_cast<size_t>(M * H), 1234.5f);
  const MoeScratchShape shape{static_cast<int>(K), stack.num_experts, H, stack.intermediate};
  std::vector<float> scratch(cpu::moe_scratch_bytes(M, shape) / sizeof(float));
  cpu::moe_experts(Tensor(x.data(), DType::F32, M, H), Tensor(ids.data(), DType::I32, M, K),
                   Tensor(w.data(), DType::F32, M, K), stack, Tensor(out.data(), DType::F32, M, H),
                   shared.empty() ? Tensor{} : Tensor(shared.data(), DType::F32, M, H),
                   Tensor(scratch.data(), DType::F32, 1, static_cast<int64_t>(scratch.size())));
  return out;
}

// Ids drawn from `allowed` (distinct within a token while K <= allowed.size()), with positive
// weights that differ from slot to slot.
struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routing make_routing(int64_t M, int64_t K, const std::vector<int32_t>& allowed, uint64_t seed) {
  Routing r;
  const auto noise = random_floats(static_cast<size_t>(M * K), seed);
  for (int64_t t = 0; t < M; ++t)
    for (int64_t j = 0; j < K; ++j) {
      r.ids.push_back(allowed[static_cast<size_t>(t * 3 + j) % allowed.size()]);
      r.weights.push_back(0.6f + 0.5f * noise[static_cast<size_t>(t * K + j)]);
    }
  return r;
}

constexpr int64_t kH = 24, kI = 16, kE = 8, kM = 11, kK = 3;

std::vector<int32_t> all_ids(int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

TEST(MoeKernel, AllExpertsLocalMatchReference) {
  Experts ex(kE, kH, kI, 10);
  auto x = random_floats(static_cast<size_t>(kM * kH), 1);
  Routing r = make_routing(kM, kK, all_ids(kE), 2);
  const auto out = run_moe(x, r.ids, r.weights, kM, kK, ex.stack(0, kE), kH);
  EXPECT_LT(rel_err(out, ref_moe(x, r.ids, r.weights, kM, kK, ex, 0, kE)), kTol);
}

TEST(MoeKernel, TheSharedExpertsOutputIsAddedAsASeparateAddWould) {
  Experts ex(kE, kH, kI, 60);
  auto x = random_floats(static_cast<size_t>(kM * kH), 11);
  const auto shared = random_floats(static_cast<size_t>(kM * kH), 12);
  Routing r = make_routing(kM, kK, all_ids(kE), 13);
  const auto routed = run_moe(x, r.ids, r.weights, kM, kK, ex.stack(0, kE), kH);
  const auto both = run_moe(x, r.ids, r.weights, kM, kK, ex.stack(0, kE), kH, shared);
  ASSERT_EQ(both.size(), routed.size());
  for (size_t i = 0; i < both.size(); ++i) ASSERT_EQ(both[i], routed[i] + shared[i]) << "element " << i;
}

TEST(MoeKernel, ExpertWithoutTokensIsSkipped) {
  Experts ex(kE, kH, kI, 20);
  // NaN weights: reading the idle expert (or mis-slicing into it) would poison the output.
  ex.poison(5);
  auto x = random_floats(static_cast<size_t>(kM * kH), 3);
  Routing r = make_routing(kM, kK, {0, 1, 2, 3, 4, 6, 7}, 4);
  const auto out = run_moe(x, r.ids, r.weights, kM, kK, ex.stack(0, kE), kH);
  EXPECT_LT(rel_err(out, ref_moe(x, r.ids, r.weights, kM, kK, ex, 0, kE)), kTol);
}

TEST(MoeKernel, OnlyLocalExpertsContributeAndOtherRowsAreZero) {
  Experts ex(kE, kH, kI, 30);
  const int first = 4, count = 4;
  auto x = random_floats(static_cast<size_t>(kM * kH), 5);
  Routing r = make_routing(kM, kK, all_ids(kE), 6);
  // Tokens 0 and 7 go only to experts on other ranks.
  for (int64_t t : {0, 7})
    for (int64_t j = 0; j < kK; ++j) r.ids[static_cast<size_t>(t * kK + j)] = static_cast<int32_t>(j);
  const auto out = run_moe(x, r.ids, r.weights, kM, kK, ex.stack(first, count), kH);
  EXPECT_LT(rel_err(out, ref_moe(x, r.ids, r.weights, kM, kK, ex, first, count)), kTol);
  for (int64_t t : {0, 7})
    for (int64_t h = 0; h < kH; ++h) EXPECT_EQ(out[static_cast<size_t>(t * kH + h)], 0.0f) << "token " << t;
}

TEST(MoeKernel, OutIsOverwrittenWhenNoTokenIsLocal) {
  Experts ex(kE, kH, kI, 40);
  auto x = random_floats(static_cast<size_t>(kM * kH), 7);
  Routing r = make_routing(kM, kK, {0, 1, 2, 3}, 8);
  const auto out = run_moe(x, r.ids, r.weights, kM, kK, ex.stack(4, 4), kH);
  for (float v : out) ASSERT_EQ(v, 0.0f);
}

TEST(MoeKernel, TokenRoutedToSeveralLocalExpertsSumsThem) {
  Experts ex(kE, kH, kI, 50);
  const int64_t M = 3, K = 2;
  auto x = random_floats(static_cast<size_t>(M * kH), 9);
  // Token 0: two different local experts; token 1: one local, one remote; token 2: the same
  // expert in both slots, which the contract sums like any other pair of slots.
  std::vector<int32_t> ids = {4, 6, 5, 1, 7, 7};
  std::vector<float> w = {0.7f, 0.3f, 0.9f, 0.1f, 0.25f, 0.5f};
  const auto both = run_moe(x, ids, w, M, K, ex.stack(4, 4), kH);
  EXPECT_LT(rel_err(both, ref_moe(x, ids, w, M, K, ex, 4, 4)), kTol);

  // Token 0 equals the sum of its two experts taken one at a time.
  std::vector<float> x0(x.begin(), x.begin() + kH);
  std::vector<int32_t> only_a = {4}, only_b = {6};
  std::vector<float> wa = {0.7f}, wb = {0.3f};
  const auto a = run_moe(x0, only_a, wa, 1, 1, ex.stack(4, 4), kH);
  const auto b = run_moe(x0, only_b, wb, 1, 1, ex.stack(4, 4), kH);
  std::vector<float> sum(static_cast<size_t>(kH));
  for (int64_t h = 0; h < kH; ++h) sum[static_cast<size_t>(h)] = a[static_cast<size_t>(h)] + b[static_cast<size_t>(h)];
  EXPECT_LT(rel_err(std::vector<float>(both.begin(), both.begin() + kH), sum), kTol);
}

// Expert parallelism: the all-reduce of every rank's partial output is the full layer.
TEST(MoeKernel, TwoRanksSumToSingleRank) {
  Experts ex(kE, kH, kI, 60);
  const int64_t M = 17;
  auto x = random_floats(static_cast<size_t>(M * kH), 11);
  Routing r = make_routing(M, kK, all_ids(kE), 12);
  const auto whole = run_moe(x, r.ids, r.weights, M, kK, ex.stack(0, kE), kH);
  const auto rank0 = run_moe(x, r.ids, r.weights, M, kK, ex.stack(0, kE / 2), kH);
  const auto rank1 = run_moe(x, r.ids, r.weights, M, kK, ex.stack(kE / 2, kE / 2), kH);
  std::vector<float> sum(whole.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = rank0[i] + rank1[i];
  EXPECT_LT(rel_err(sum, whole), kTol);
  EXPECT_LT(rel_err(whole, ref_moe(x, r.ids, r.weights, M, kK, ex, 0, kE)), kTol);
}

// ---------------------------------------------------------------- mla_expand_kv

struct MlaShape {
  int64_t M = 5;
  int heads = 3, nope = 4, v = 6, rope = 2;
};

// The expected k [M, heads*(nope+rope)] and v [M, heads*v], built element by element.
void expected_kv(const MlaShape& s, const std::vector<float>& kv, const float* rot, int64_t rot_stride,
                 std::vector<float>& k, std::vector<float>& v) {
  const int64_t qk = s.nope + s.rope, kvw = s.nope + s.v;
  k.assign(static_cast<size_t>(s.M * s.heads * qk), 0.0f);
  v.assign(static_cast<size_t>(s.M * s.heads * s.v), 0.0f);
  for (int64_t t = 0; t < s.M; ++t)
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < s.nope; ++i)
        k[static_cast<size_t>(t * s.heads * qk + h * qk + i)] = kv[static_cast<size_t>(t * s.heads * kvw + h * kvw + i)];
      for (int64_t i = 0; i < s.rope; ++i)
        k[static_cast<size_t>(t * s.heads * qk + h * qk + s.nope + i)] = rot[t * rot_stride + i];
      for (int64_t i = 0; i < s.v; ++i)
        v[static_cast<size_t>(t * s.heads * s.v + h * s.v + i)] =
            kv[static_cast<size_t>(t * s.heads * kvw + h * kvw + s.nope + i)];
    }
}

void check_expand(const MlaShape& s, std::vector<float>& kv, Tensor k_rot) {
  const int64_t qk = s.nope + s.rope;
  // NaN-filled outputs: an element left unwritten fails EXPECT_EQ.
  std::vector<float> k(static_cast<size_t>(s.M * s.heads * qk), kNaN);
  std::vector<float> v(static_cast<size_t>(s.M * s.heads * s.v), kNaN);
  cpu::mla_expand_kv(Tensor(kv.data(), DType::F32, s.M, s.heads * (s.nope + s.v)), k_rot, s.heads, s.nope, s.v,
                     Tensor(k.data(), DType::F32, s.M, s.heads * qk),
                     Tensor(v.data(), DType::F32, s.M, s.heads * s.v));
  std::vector<float> want_k, want_v;
  expected_kv(s, kv, k_rot.as<float>(), k_rot.stride, want_k, want_v);
  EXPECT_EQ(k, want_k);
  EXPECT_EQ(v, want_v);
}

TEST(MlaKernel, ExpandKvCopiesNopeRopeAndValue) {
  const MlaShape s;
  auto kv = random_floats(static_cast<size_t>(s.M * s.heads * (s.nope + s.v)), 21);
  auto rot = random_floats(static_cast<size_t>(s.M * s.rope), 22);
  check_expand(s, kv, Tensor(rot.data(), DType::F32, s.M, s.rope));
}

// In the model k_rot is the tail of kv_a_proj's output row, a strided view.
TEST(MlaKernel, ExpandKvReadsStridedKRot) {
  const MlaShape s;
  const int64_t latent = 7;
  auto kv = random_floats(static_cast<size_t>(s.M * s.heads * (s.nope + s.v)), 23);
  auto wide = random_floats(static_cast<size_t>(s.M * (latent + s.rope)), 24);
  const Tensor k_rot = Tensor(wide.data(), DType::F32, s.M, latent + s.rope).col_slice(latent, s.rope);
  ASSERT_FALSE(k_rot.contiguous());
  check_expand(s, kv, k_rot);
}

}  // namespace
