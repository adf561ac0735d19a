// The CPU ops are the reference every other backend is tested against, so they are checked
// here against naive double-precision formulas written independently of the implementation.
#include <omp.h>

#include <cstring>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "kernels/ops_cpu.h"
#include "support/test_support.h"

namespace {

using e3::kernels::AttentionParams;
using e3::DType;
using e3::kernels::RopeParams;
using e3::kernels::RopeTable;
using e3::kernels::SequenceLayout;
using e3::kernels::Tensor;
using e3::test::random_floats;
namespace cpu = e3::kernels::cpu;

constexpr double kTol = 1e-5;

// Frobenius norm of (got - want) over that of want.
double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

Tensor view(std::vector<float>& v, int64_t rows, int64_t cols) {
  EXPECT_EQ(static_cast<int64_t>(v.size()), rows * cols);
  return Tensor(v.data(), DType::F32, rows, cols);
}

std::vector<float> scaled(std::vector<float> v, float s) {
  for (float& x : v) x *= s;
  return v;
}

// A packed batch built from explicit per-token positions and sequence lengths; owns the
// int32 arrays that the layout's tensors point into.
struct Batch {
  std::vector<int32_t> positions;
  std::vector<int32_t> cu{0};
  SequenceLayout layout;

  Batch(const std::vector<int>& lengths, std::vector<int32_t> pos = {}) {
    for (int len : lengths) {
      cu.push_back(cu.back() + len);
      if (!pos.empty()) continue;
      for (int i = 0; i < len; ++i) positions.push_back(i);
    }
    if (!pos.empty()) positions = std::move(pos);
    EXPECT_EQ(static_cast<int32_t>(positions.size()), cu.back());
    layout.positions = Tensor(positions.data(), DType::I32, 1, static_cast<int64_t>(positions.size()));
    layout.cu_seqlens = Tensor(cu.data(), DType::I32, 1, static_cast<int64_t>(cu.size()));
    layout.cu_seqlens_host = cu.data();
    layout.num_seqs = static_cast<int>(lengths.size());
    layout.num_tokens = cu.back();
    layout.max_seqlen = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
};

// ---------------------------------------------------------------- linear

std::vector<double> ref_linear(const float* x, int64_t x_stride, const std::vector<float>& w, const float* bias,
                               int64_t M, int64_t N, int64_t K) {
  std::vector<double> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias ? bias[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(x[m * x_stride + k]) * w[n * K + k];
      y[m * N + n] = acc;
    }
  return y;
}

TEST(CpuKernelLinear, MatchesReferenceWithoutBias) {
  const int64_t M = 7, N = 13, K = 33;
  auto x = random_floats(M * K, 1), w = random_floats(N * K, 2);
  std::vector<float> y(M * N, 123.0f);  // stale values must be overwritten, not accumulated
  cpu::linear(view(x, M, K), view(w, N, K), nullptr, view(y, M, N));
  EXPECT_LT(rel_err(y, ref_linear(x.data(), K, w, nullptr, M, N, K)), kTol);
}

TEST(CpuKernelLinear, MatchesReferenceWithBias) {
  const int64_t M = 5, N = 9, K = 16;
  auto x = random_floats(M * K, 3), w = random_floats(N * K, 4), b = random_floats(N, 5);
  std::vector<float> y(M * N, -7.0f);
  Tensor bias = view(b, 1, N);
  cpu::linear(view(x, M, K), view(w, N, K), &bias, view(y, M, N));
  EXPECT_LT(rel_err(y, ref_linear(x.data(), K, w, b.data(), M, N, K)), kTol);
}

TEST(CpuKernelLinear, ReadsStridedInputAndWritesStridedOutput) {
  // x is columns [3, 3 + K) of a wider buffer, as when q/k/v are slices of a fused projection.
  const int64_t M = 6, N = 10, K = 12, XW = K + 7, YW = N + 5, y_off = 2;
  auto xbuf = random_floats(M * XW, 6), w = random_floats(N * K, 7), b = random_floats(N, 8);
  std::vector<float> ybuf(M * YW, 42.0f);
  Tensor x = view(xbuf, M, XW).col_slice(3, K);
  Tensor y = view(ybuf, M, YW).col_slice(y_off, N);
  Tensor bias = view(b, 1, N);
  cpu::linear(x, view(w, N, K), &bias, y);

  const auto want = ref_linear(xbuf.data() + 3, XW, w, b.data(), M, N, K);
  std::vector<float> got;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) got.push_back(ybuf[m * YW + y_off + n]);
  EXPECT_LT(rel_err(got, want), kTol);
  // Columns outside the output view are untouched.
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < YW; ++c)
      if (c < y_off || c >= y_off + N) {
        EXPECT_EQ(ybuf[m * YW + c], 42.0f) << m << "," << c;
      }
}

// A row's result must not depend on the rows beside it: the extraction packs samples into steps,
// and a sample's stored states must be the same bytes whatever shares its step (a resumed run
// packs differently). Every sub-block of rows, at every offset, against the whole product; with
// thread counts that split the work differently too.
TEST(CpuKernelLinear, EachRowIsTheSameBitsWhateverRowsShareTheCall) {
  const int64_t M = 67, N = 45, K = 203;  // K not a multiple of the lane width, N not of the tile
  auto x = random_floats(M * K, 11), w = random_floats(N * K, 12), b = random_floats(N, 13);
  const Tensor bias = view(b, 1, N);
  std::vector<float> whole(M * N);
  cpu::linear(view(x, M, K), view(w, N, K), &bias, view(whole, M, N));
  const int saved_threads = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (int64_t rows : {1, 2, 3, 5, 8, 31, 33, 66})
      for (int64_t first : {int64_t{0}, int64_t{1}, M - rows}) {
        std::vector<float> part(static_cast<size_t>(rows * N));
        cpu::linear(Tensor(x.data() + first * K, DType::F32, rows, K), view(w, N, K), &bias, view(part, rows, N));
        ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + first * N, part.size() * sizeof(float)))
            << rows << " rows from row " << first << " with " << threads << " threads";
      }
  }
  omp_set_num_threads(saved_threads);
}

TEST(CpuKernelLinear, RejectsMismatchedShapes) {
  std::vector<float> x(4 * 3), w(5 * 4), y(4 * 5);
  try {
    cpu::linear(view(x, 4, 3), view(w, 5, 4), nullptr, view(y, 4, 5));
    FAIL() << "expected an error";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Internal);
  }
}

// ---------------------------------------------------------------- rmsnorm

std::vector<double> ref_rmsnorm(const std::vector<float>& x, const std::vector<float>& w, double eps, int64_t rows,
                                int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(x[r * cols + c]) * x[r * cols + c];
    const double denom = std::sqrt(ss / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = w[c] * (x[r * cols + c] / denom);
  }
  return y;
}

TEST(CpuKernelRmsnorm, MatchesReference) {
  const int64_t R = 9, C = 40;
  auto x = scaled(random_floats(R * C, 10), 3.0f), w = random_floats(C, 11);
  for (float eps : {1e-6f, 1e-2f}) {
    std::vector<float> y(R * C);
    cpu::rmsnorm(view(x, R, C), view(w, 1, C), eps, view(y, R, C));
    EXPECT_LT(rel_err(y, ref_rmsnorm(x, w, eps, R, C)), kTol) << "eps " << eps;
  }
}

TEST(CpuKernelRmsnorm, EpsDominatesTinyRows) {
  // A row of tiny values: the result is governed by eps, not by the row's own scale.
  const int64_t C = 16;
  auto x = scaled(random_floats(C, 12), 1e-4f), w = random_floats(C, 13);
  std::vector<float> y(C);
  cpu::rmsnorm(view(x, 1, C), view(w, 1, C), 1e-2f, view(y, 1, C));
  EXPECT_LT(rel_err(y, ref_rmsnorm(x, w, 1e-2, 1, C)), kTol);
}

TEST(CpuKernelRmsnorm, OutputMayAliasInput) {
  const int64_t R = 4, C = 24;
  auto x = random_floats(R * C, 14), w = random_floats(C, 15);
  const auto want = ref_rmsnorm(x, w, 1e-5, R, C);
  cpu::rmsnorm(view(x, R, C), view(w, 1, C), 1e-5f, view(x, R, C));
  EXPECT_LT(rel_err(x, want), kTol);
}

// ---------------------------------------------------------------- rope

struct RopeCase {
  bool interleaved;
  int num_heads, head_dim, rot_offset, rot_dim;
};

class CpuKernelRope : public ::testing::TestWithParam<RopeCase> {};

TEST_P(CpuKernelRope, MatchesReference) {
  const RopeCase c = GetParam();
  const int half = c.rot_dim / 2;
  // Positions need not be 0..n-1 per sequence: the op must index the table by them.
  Batch batch({3, 4}, {0, 1, 2, 5, 6, 7, 9});
  const int64_t T = batch.layout.num_tokens, P = 12, W = int64_t{c.num_heads} * c.head_dim;
  std::vector<float> cos_t(P * half), sin_t(P * half);
  const auto angles = random_floats(P * half, 20);
  for (size_t i = 0; i < cos_t.size(); ++i) {
    // Not unit-norm on purpose: attention factors are folded into the tables.
    cos_t[i] = 1.3f * std::cos(3.0f * angles[i]);
    sin_t[i] = 1.3f * std::sin(3.0f * angles[i]);
  }
  auto x = random_floats(T * W, 21);
  const std::vector<float> x0 = x;

  std::vector<double> want(x0.begin(), x0.end());
  for (int64_t t = 0; t < T; ++t) {
    const int64_t pos = batch.positions[t];
    for (int h = 0; h < c.num_heads; ++h) {
      const int64_t base = t * W + int64_t{h} * c.head_dim + c.rot_offset;
      for (int i = 0; i < half; ++i) {
        const int64_t ia = base + (c.interleaved ? 2 * i : i);
        const int64_t ib = base + (c.interleaved ? 2 * i + 1 : i + half);
        const double cs = cos_t[pos * half + i], sn = sin_t[pos * half + i];
        want[ia] = x0[ia] * cs - x0[ib] * sn;
        want[ib] = x0[ib] * cs + x0[ia] * sn;
      }
    }
  }

  RopeParams p;
  p.num_heads = c.num_heads;
  p.head_dim = c.head_dim;
  p.rot_offset = c.rot_offset;
  p.rot_dim = c.rot_dim;
  p.interleaved = c.interleaved;
  RopeTable table{view(cos_t, P, half), view(sin_t, P, half)};
  cpu::rope(view(x, T, W), p, table, batch.layout);

  EXPECT_LT(rel_err(x, want), kTol);
  // Columns outside the rotated range are left bit-identical.
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < c.num_heads; ++h)
      for (int d = 0; d < c.head_dim; ++d)
        if (d < c.rot_offset || d >= c.rot_offset + c.rot_dim) {
          const int64_t i = t * W + int64_t{h} * c.head_dim + d;
          EXPECT_EQ(x[i], x0[i]) << "token " << t << " head " << h << " dim " << d;
        }
}

INSTANTIATE_TEST_SUITE_P(
    CpuKernel, CpuKernelRope,
    ::testing::Values(RopeCase{false, 3, 8, 0, 8}, RopeCase{true, 3, 8, 0, 8}, RopeCase{false, 2, 12, 2, 6},
                      RopeCase{true, 2, 12, 2, 6}, RopeCase{false, 4, 10, 4, 4}, RopeCase{true, 4, 10, 6, 4}),
    [](const ::testing::TestParamInfo<RopeCase>& info) {
      const RopeCase& c = info.param;
      return std::string(c.interleaved ? "interleaved" : "halves") + "_h" + std::to_string(c.num_heads) + "_d" +
             std::to_string(c.head_dim) + "_off" + std::to_string(c.rot_offset) + "_rot" + std::to_string(c.rot_dim);
    });

TEST(CpuKernelRopeErrors, RejectsPositionOutsideTable) {
  Batch batch({2}, {0, 4});
  std::vector<float> cos_t(4 * 2, 1.0f), sin_t(4 * 2, 0.0f), x(2 * 4);
  RopeParams p;
  p.num_heads = 1;
  p.head_dim = 4;
  p.rot_dim = 4;
  RopeTable table{view(cos_t, 4, 2), view(sin_t, 4, 2)};
  try {
    cpu::rope(view(x, 2, 4), p, table, batch.layout);
    FAIL() << "expected an error";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Internal);
    EXPECT_NE(std::string(e.what()).find("position 4"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- attention

struct AttnData {
  std::vector<float> q, k, v;
};

// out[t, h*dv + d] in double: softmax over the visible keys of t's own sequence.
std::vector<double> ref_attention(const AttnData& a, const AttentionParams& p, const Batch& b) {
  const int64_t T = b.layout.num_tokens, qw = int64_t{p.num_q_heads} * p.qk_head_dim,
                kw = int64_t{p.num_kv_heads} * p.qk_head_dim, vw = int64_t{p.num_kv_heads} * p.v_head_dim,
                ow = int64_t{p.num_q_heads} * p.v_head_dim;
  const int group = p.num_q_heads / p.num_kv_heads;
  std::vector<double> out(static_cast<size_t>(T * ow), 0.0);
  for (int s = 0; s < b.layout.num_seqs; ++s) {
    for (int64_t i = b.cu[s]; i < b.cu[s + 1]; ++i) {
      for (int h = 0; h < p.num_q_heads; ++h) {
        const int kvh = h / group;
        std::vector<double> scores;
        std::vector<int64_t> keys;
        for (int64_t j = b.cu[s]; j <= i; ++j) {
          if (p.sliding_window > 0 && i - j >= p.sliding_window) continue;
          double dot = 0.0;
          for (int d = 0; d < p.qk_head_dim; ++d)
            dot += static_cast<double>(a.q[i * qw + h * p.qk_head_dim + d]) * a.k[j * kw + kvh * p.qk_head_dim + d];
          scores.push_back(dot * p.scale);
          keys.push_back(j);
        }
        const double mx = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double& sc : scores) sum += (sc = std::exp(sc - mx));
        for (size_t n = 0; n < keys.size(); ++n)
          for (int d = 0; d < p.v_head_dim; ++d)
            out[i * ow + h * p.v_head_dim + d] += scores[n] / sum * a.v[keys[n] * vw + kvh * p.v_head_dim + d];
      }
    }
  }
  return out;
}

AttentionParams gqa_params(int64_t window) {
  AttentionParams p;
  p.num_q_heads = 4;
  p.num_kv_heads = 2;
  p.qk_head_dim = 8;
  p.v_head_dim = 6;
  p.scale = 0.7f;
  p.sliding_window = window;
  return p;
}

AttnData random_attn(const AttentionParams& p, int64_t T, uint64_t seed) {
  // Scaled up so that the softmax is far from uniform and a wrong mask would show.
  return {scaled(random_floats(T * p.num_q_heads * p.qk_head_dim, seed), 2.0f),
          scaled(random_floats(T * p.num_kv_heads * p.qk_head_dim, seed + 1), 2.0f),
          random_floats(T * p.num_kv_heads * p.v_head_dim, seed + 2)};
}

std::vector<float> run_attention(AttnData& a, const AttentionParams& p, const Batch& b) {
  const int64_t T = b.layout.num_tokens;
  std::vector<float> out(T * p.num_q_heads * p.v_head_dim, 99.0f);
  std::vector<float> scratch;
  cpu::attention(view(a.q, T, int64_t{p.num_q_heads} * p.qk_head_dim),
                 view(a.k, T, int64_t{p.num_kv_heads} * p.qk_head_dim),
                 view(a.v, T, int64_t{p.num_kv_heads} * p.v_head_dim),
                 view(out, T, int64_t{p.num_q_heads} * p.v_head_dim), p, b.layout, scratch);
  return out;
}

TEST(CpuKernelAttention, PackedCausalGqaMatchesReference) {
  Batch batch({5, 1, 7});
  const AttentionParams p = gqa_params(0);
  AttnData a = random_attn(p, batch.layout.num_tokens, 30);
  const auto out = run_attention(a, p, batch);
  EXPECT_LT(rel_err(out, ref_attention(a, p, batch)), kTol);
}

TEST(CpuKernelAttention, SlidingWindowMatchesReference) {
  Batch batch({6, 9, 2});
  for (int64_t window : {1, 3, 4}) {
    const AttentionParams p = gqa_params(window);
    AttnData a = random_attn(p, batch.layout.num_tokens, 40 + window);
    const auto out = run_attention(a, p, batch);
    EXPECT_LT(rel_err(out, ref_attention(a, p, batch)), kTol) << "window " << window;
  }
}

TEST(CpuKernelAttention, WindowOfOneReturnsOwnValue) {
  // Only the diagonal is visible, so each head's output is exactly its kv head's own v row.
  Batch batch({4, 3});
  const AttentionParams p = gqa_params(1);
  AttnData a = random_attn(p, batch.layout.num_tokens, 50);
  const auto out = run_attention(a, p, batch);
  for (int64_t t = 0; t < batch.layout.num_tokens; ++t)
    for (int h = 0; h < p.num_q_heads; ++h)
      for (int d = 0; d < p.v_head_dim; ++d)
        EXPECT_FLOAT_EQ(out[t * p.num_q_heads * p.v_head_dim + h * p.v_head_dim + d],
                        a.v[t * p.num_kv_heads * p.v_head_dim + (h / 2) * p.v_head_dim + d]);
}

TEST(CpuKernelAttention, StridedFusedQkvMatchesReference) {
  // q, k and v as column slices of one fused projection output.
  Batch batch({3, 5});
  const AttentionParams p = gqa_params(0);
  const int64_t T = batch.layout.num_tokens, qw = int64_t{p.num_q_heads} * p.qk_head_dim,
                kw = int64_t{p.num_kv_heads} * p.qk_head_dim, vw = int64_t{p.num_kv_heads} * p.v_head_dim,
                ow = int64_t{p.num_q_heads} * p.v_head_dim;
  auto fused = scaled(random_floats(T * (qw + kw + vw), 60), 2.0f);
  AttnData a;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = fused.data() + t * (qw + kw + vw);
    a.q.insert(a.q.end(), row, row + qw);
    a.k.insert(a.k.end(), row + qw, row + qw + kw);
    a.v.insert(a.v.end(), row + qw + kw, row + qw + kw + vw);
  }
  Tensor all = view(fused, T, qw + kw + vw);
  std::vector<float> out(T * ow);
  std::vector<float> scratch;
  cpu::attention(all.col_slice(0, qw), all.col_slice(qw, kw), all.col_slice(qw + kw, vw), view(out, T, ow), p,
                 batch.layout, scratch);
  EXPECT_LT(rel_err(out, ref_attention(a, p, batch)), kTol);
}

TEST(CpuKernelAttention, NeverReadsAnotherSequence) {
  Batch batch({4, 6, 3});
  const AttentionParams p = gqa_params(0);
  AttnData a = random_attn(p, batch.layout.num_tokens, 70);
  const auto before = run_attention(a, p, batch);

  // Replace keys and values of the middle sequence only.
  const int64_t kw = int64_t{p.num_kv_heads} * p.qk_head_dim, vw = int64_t{p.num_kv_heads} * p.v_head_dim;
  const auto noise = random_floats(static_cast<size_t>(batch.cu[2] - batch.cu[1]) * (kw + vw), 71);
  size_t n = 0;
  for (int64_t t = batch.cu[1]; t < batch.cu[2]; ++t) {
    for (int64_t c = 0; c < kw; ++c) a.k[t * kw + c] = 5.0f * noise[n++];
    for (int64_t c = 0; c < vw; ++c) a.v[t * vw + c] = 5.0f * noise[n++];
  }
  const auto after = run_attention(a, p, batch);

  const int64_t ow = int64_t{p.num_q_heads} * p.v_head_dim;
  for (int64_t t = 0; t < batch.layout.num_tokens; ++t) {
    const bool in_changed = t >= batch.cu[1] && t < batch.cu[2];
    bool same = true;
    for (int64_t c = 0; c < ow; ++c) same = same && before[t * ow + c] == after[t * ow + c];
    if (in_changed) {
      EXPECT_FALSE(same) << "token " << t << " of the changed sequence did not change";
    } else {
      EXPECT_TRUE(same) << "token " << t << " read keys of another sequence";
    }
  }
  EXPECT_LT(rel_err(after, ref_attention(a, p, batch)), kTol);
}

TEST(CpuKernelAttention, SingleKvHeadServesAllQueryHeads) {
  Batch batch({5});
  AttentionParams p;
  p.num_q_heads = 3;
  p.num_kv_heads = 1;
  p.qk_head_dim = 4;
  p.v_head_dim = 4;
  p.scale = 0.5f;
  AttnData a = random_attn(p, batch.layout.num_tokens, 80);
  const auto out = run_attention(a, p, batch);
  EXPECT_LT(rel_err(out, ref_attention(a, p, batch)), kTol);
}

// ---------------------------------------------------------------- elementwise

TEST(CpuKernelSiluMul, MatchesReference) {
  const int64_t R = 6, C = 35;
  auto g = scaled(random_floats(R * C, 90), 8.0f), u = scaled(random_floats(R * C, 91), 3.0f);
  std::vector<float> out(R * C);
  cpu::silu_mul(view(g, R, C), view(u, R, C), view(out, R, C));
  std::vector<double> want(R * C);
  for (size_t i = 0; i < want.size(); ++i) want[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
  EXPECT_LT(rel_err(out, want), kTol);
}

TEST(CpuKernelEmbedding, GathersRows) {
  const int64_t V = 11, H = 7;
  auto table = random_floats(V * H, 100);
  std::vector<int32_t> ids{3, 0, 10, 3, 7};
  const auto n = static_cast<int64_t>(ids.size());
  std::vector<float> out(n * H);
  cpu::embedding(Tensor(ids.data(), DType::I32, 1, n), view(table, V, H), view(out, n, H));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < H; ++c) EXPECT_EQ(out[i * H + c], table[ids[i] * H + c]) << i << "," << c;
}

TEST(CpuKernelEmbedding, RejectsIdOutsideTable) {
  std::vector<float> table(4 * 2), out(2 * 2);
  for (int32_t bad : {4, -1}) {
    std::vector<int32_t> ids{1, bad};
    try {
      cpu::embedding(Tensor(ids.data(), DType::I32, 1, 2), view(table, 4, 2), view(out, 2, 2));
      FAIL() << "expected an error for id " << bad;
    } catch (const e3::Error& e) {
      EXPECT_EQ(e.kind(), e3::ErrorKind::Internal);
    }
  }
}

TEST(CpuKernelAddInplace, MatchesReference) {
  const int64_t R = 5, C = 17;
  auto acc = random_floats(R * C, 110), x = random_floats(R * C, 111);
  std::vector<double> want(R * C);
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<double>(acc[i]) + x[i];
  cpu::add_inplace(view(acc, R, C), view(x, R, C));
  EXPECT_LT(rel_err(acc, want), kTol);
}

TEST(CpuKernelAddInplace, StridedAccumulatorLeavesOtherColumns) {
  const int64_t R = 4, C = 6, W = 10, off = 3;
  auto buf = random_floats(R * W, 112), x = random_floats(R * C, 113);
  const auto buf0 = buf;
  cpu::add_inplace(view(buf, R, W).col_slice(off, C), view(x, R, C));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < W; ++c) {
      const bool inside = c >= off && c < off + C;
      const float want = inside ? buf0[r * W + c] + x[r * C + c - off] : buf0[r * W + c];
      EXPECT_EQ(buf[r * W + c], want) << r << "," << c;
    }
}

TEST(CpuKernelAddBias, BroadcastsOverRows) {
  const int64_t R = 7, C = 13;
  auto acc = random_floats(R * C, 120), b = random_floats(C, 121);
  std::vector<double> want(R * C);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) want[r * C + c] = static_cast<double>(acc[r * C + c]) + b[c];
  cpu::add_bias(view(acc, R, C), view(b, 1, C));
  EXPECT_LT(rel_err(acc, want), kTol);
}

TEST(CpuKernelAddBias, RejectsWrongBiasLength) {
  std::vector<float> acc(2 * 3), b(4);
  try {
    cpu::add_bias(view(acc, 2, 3), view(b, 1, 4));
    FAIL() << "expected an error";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Internal);
  }
}

}  // namespace
