// Every CUDA kernel against its CPU twin on random inputs. Inputs are rounded to bf16 first,
// so both backends see the same values; outputs are poisoned with NaN before each run, so an
// element the kernel forgets to write fails. Skipped, saying so, where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "support/test_support.h"

namespace e3::kernels {
namespace {

std::vector<float> bf16_rounded(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v = test::random_floats(n, seed);
  for (float& x : v) x = bf16_to_float(float_to_bf16(x * scale));
  return v;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The same logical tensor on the CPU backend (fp32) and the GPU (bf16 or as asked).
struct Pair {
  DeviceBuffer cpu_buf, gpu_buf;
  Tensor cpu, gpu;
};

class CudaKernel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible: the CUDA kernel tests need one (they run on the GPU machine)";
    gpu_ = make_cuda_backend(0);
    cpu_ = make_cpu_backend(2);
  }

  // rows x cols (row stride `stride`, default cols) filled with `values` on both sides.
  Pair make(int64_t rows, int64_t cols, const std::vector<float>& values, DType gpu_type = DType::BF16,
            int64_t stride = 0) {
    if (stride == 0) stride = cols;
    Pair p;
    p.cpu_buf = cpu_->allocate(static_cast<size_t>(rows * stride) * 4);
    p.gpu_buf = gpu_->allocate(static_cast<size_t>(rows * stride) * dtype_size(gpu_type));
    std::vector<float> full(static_cast<size_t>(rows * stride), std::numeric_limits<float>::quiet_NaN());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) full[static_cast<size_t>(r * stride + c)] = values[static_cast<size_t>(r * cols + c)];
    Tensor cpu_full = p.cpu_buf.view(DType::F32, rows, stride), gpu_full = p.gpu_buf.view(gpu_type, rows, stride);
    cpu_->upload_float(cpu_full, full.data());
    gpu_->upload_float(gpu_full, full.data());
    p.cpu = cpu_full.col_slice(0, cols);
    p.gpu = gpu_full.col_slice(0, cols);
    return p;
  }
  Pair poisoned(int64_t rows, int64_t cols, DType gpu_type = DType::BF16) {
    return make(rows, cols, std::vector<float>(static_cast<size_t>(rows * cols), std::numeric_limits<float>::quiet_NaN()),
                gpu_type);
  }
  Pair ints(const std::vector<int32_t>& v) {
    Pair p;
    p.cpu_buf = cpu_->allocate(v.size() * 4);
    p.gpu_buf = gpu_->allocate(v.size() * 4);
    p.cpu = p.cpu_buf.view(DType::I32, 1, static_cast<int64_t>(v.size()));
    p.gpu = p.gpu_buf.view(DType::I32, 1, static_cast<int64_t>(v.size()));
    cpu_->upload_raw(p.cpu, v.data());
    gpu_->upload_raw(p.gpu, v.data());
    return p;
  }
  std::vector<float> host(Backend& be, Tensor t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    be.download_float(t, out.data());
    return out;
  }
  void expect_close(const Pair& p, double tol, const std::string& what) {
    const double e = rel_err(host(*gpu_, p.gpu), host(*cpu_, p.cpu));
    EXPECT_LT(e, tol) << what;
  }

  // A packed batch of sequences of the given lengths on both backends.
  struct Seqs {
    Pair positions, cu;
    std::vector<int32_t> cu_host;
    SequenceLayout cpu, gpu;
  };
  Seqs seqs(const std::vector<int>& lens) {
    Seqs s;
    std::vector<int32_t> pos;
    s.cu_host.push_back(0);
    int64_t longest = 0;
    for (int n : lens) {
      for (int i = 0; i < n; ++i) pos.push_back(i);
      s.cu_host.push_back(s.cu_host.back() + n);
      longest = std::max<int64_t>(longest, n);
    }
    s.positions = ints(pos);
    s.cu = ints(s.cu_host);
    for (SequenceLayout* l : {&s.cpu, &s.gpu}) {
      l->cu_seqlens_host = s.cu_host.data();
      l->num_seqs = static_cast<int>(lens.size());
      l->num_tokens = s.cu_host.back();
      l->max_seqlen = longest;
    }
    s.cpu.positions = s.positions.cpu;
    s.gpu.positions = s.positions.gpu;
    s.cpu.cu_seqlens = s.cu.cpu;
    s.gpu.cu_seqlens = s.cu.gpu;
    return s;
  }

  void check_experts(int64_t M, int64_t H, int64_t I);
  // Top-k choices [M, K] (int32) over E experts, spread over all of them, and their weights [M, K].
  std::pair<Pair, Pair> routing(int64_t M, int K, int E) {
    std::vector<int32_t> ids;
    std::vector<float> weights;
    for (int64_t t = 0; t < M; ++t)
      for (int j = 0; j < K; ++j) {
        ids.push_back(static_cast<int32_t>((t * 5 + j * 3 + (t % 3)) % E));
        weights.push_back(0.1f + 0.2f * static_cast<float>(j) + 0.001f * static_cast<float>(t % 7));
      }
    Pair i = ints(ids);
    i.cpu = i.cpu.reshaped(K);
    i.gpu = i.gpu.reshaped(K);
    return {std::move(i), make(M, K, weights, DType::F32)};
  }
  void check_quantized_experts(int64_t H, int64_t I, bool want_in_gemm);
  // moe_experts on a backend of its own with E3_GEMM_VARIANT `variant` (and E3_MOE_UNFUSED): x
  // [M, H] through `experts` by the top-k `ids` and `w`, quantized experts converted in the GEMM
  // or not; every output written and finite.
  std::vector<float> experts_on(int variant, bool unfused, bool quantized_in_gemm, const Pair& x, const Pair& ids,
                                const Pair& w, const ExpertStack& experts, int l2_sides = CudaOptions::kNoL2Sides) {
    const int64_t M = x.gpu.rows, H = x.gpu.cols;
    CudaOptions options{variant, unfused};
    options.l2_sides = l2_sides;
    std::unique_ptr<Backend> gpu = make_cuda_backend(0, options);
    gpu->set_quantized_experts_in_gemm(quantized_in_gemm);
    EXPECT_EQ(gpu->reads_quantized_experts(experts), quantized_in_gemm) << "variant " << variant;
    Pair out = poisoned(M, H, DType::F32);
    const MoeScratchShape shape{static_cast<int>(ids.gpu.cols), experts.num_experts, H, experts.intermediate, false};
    DeviceBuffer scratch = gpu->allocate(gpu->moe_scratch_bytes(M, shape));
    gpu->moe_experts(x.gpu, ids.gpu, w.gpu, experts, out.gpu, Tensor{},
                     scratch.view(DType::I32, 1, static_cast<int64_t>(scratch.bytes() / 4)));
    std::vector<float> got = host(*gpu, out.gpu);
    size_t nonfinite = 0;
    for (float v : got) nonfinite += !std::isfinite(v);
    EXPECT_EQ(nonfinite, 0u) << "unwritten or overflowing outputs, variant " << variant;
    return got;
  }
  std::unique_ptr<Backend> gpu_, cpu_;
};

TEST_F(CudaKernel, LinearWithAndWithoutBias) {
  const int64_t M = 77, K = 96, N = 40;
  Pair x = make(M, K, bf16_rounded(M * K, 1)), w = make(N, K, bf16_rounded(N * K, 2), DType::BF16);
  Pair b = make(1, N, bf16_rounded(N, 3));
  for (bool bias : {false, true}) {
    Pair y = poisoned(M, N);
    cpu_->linear(x.cpu, w.cpu, bias ? &b.cpu : nullptr, y.cpu);
    gpu_->linear(x.gpu, w.gpu, bias ? &b.gpu : nullptr, y.gpu);
    expect_close(y, 1e-2, bias ? "with bias" : "no bias");
  }
}

TEST_F(CudaKernel, LinearFp32ForTheRouter) {
  const int64_t M = 40, K = 64, N = 16;
  Pair x = make(M, K, test::random_floats(M * K, 29), DType::F32), w = make(N, K, test::random_floats(N * K, 30), DType::F32);
  Pair y = poisoned(M, N, DType::F32);
  cpu_->linear(x.cpu, w.cpu, nullptr, y.cpu);
  gpu_->linear(x.gpu, w.gpu, nullptr, y.gpu);
  expect_close(y, 1e-5, "fp32 x fp32 -> fp32");
}

TEST_F(CudaKernel, LinearStridedInputAndFp32Output) {
  const int64_t M = 50, K = 64, N = 24;
  Pair x = make(M, K, bf16_rounded(M * K, 4), DType::BF16, K + 32);  // a column slice of a wider tensor
  Pair w = make(N, K, bf16_rounded(N * K, 5));
  Pair y = poisoned(M, N, DType::F32);
  cpu_->linear(x.cpu, w.cpu, nullptr, y.cpu);
  gpu_->linear(x.gpu, w.gpu, nullptr, y.gpu);
  expect_close(y, 1e-5, "fp32 output from bf16 operands (exact products, fp32 sums)");
}

TEST_F(CudaKernel, RmsnormAddRmsnormAndPerHead) {
  const int64_t M = 33, H = 320;
  Pair x = make(M, H, bf16_rounded(M * H, 6)), w = make(1, H, bf16_rounded(H, 7));
  Pair out = poisoned(M, H);
  cpu_->rmsnorm(x.cpu, w.cpu, 1e-6f, out.cpu);
  gpu_->rmsnorm(x.gpu, w.gpu, 1e-6f, out.gpu);
  expect_close(out, 1e-2, "rmsnorm");

  // The residual stream and the block output are fp32; the normalised output bf16 and fp32.
  // 320 columns take the 16-byte kernel, 318 the scalar one.
  for (const int64_t width : {H, H - 2}) {
    Pair wn = make(1, width, bf16_rounded(width, 7));
    Pair res = make(M, width, test::random_floats(M * width, 8), DType::F32);
    Pair delta = make(M, width, test::random_floats(M * width, 9), DType::F32);
    Pair out2 = poisoned(M, width), out32 = poisoned(M, width, DType::F32);
    cpu_->add_rmsnorm(res.cpu, delta.cpu, wn.cpu, 1e-5f, out2.cpu, out32.cpu);
    gpu_->add_rmsnorm(res.gpu, delta.gpu, wn.gpu, 1e-5f, out2.gpu, out32.gpu);
    const std::string cols = fmt::format(" ({} columns)", width);
    expect_close(res, 1e-6, "add_rmsnorm residual (fp32)" + cols);
    expect_close(out2, 5e-3, "add_rmsnorm output (bf16)" + cols);
    expect_close(out32, 1e-5, "add_rmsnorm output (fp32)" + cols);
  }
  Pair res = make(M, H, test::random_floats(M * H, 8), DType::F32);
  Pair f32_out = poisoned(M, H, DType::F32);
  cpu_->rmsnorm(res.cpu, w.cpu, 1e-6f, f32_out.cpu);
  gpu_->rmsnorm(res.gpu, w.gpu, 1e-6f, f32_out.gpu);
  expect_close(f32_out, 1e-5, "rmsnorm fp32 -> fp32");

  const int hd = 48;
  Pair qk = make(M, 4 * hd, bf16_rounded(M * 4 * hd, 10), DType::BF16, 6 * hd);
  Pair hw = make(1, hd, bf16_rounded(hd, 11));
  cpu_->rmsnorm_heads(qk.cpu, hd, hw.cpu, 1e-6f);
  gpu_->rmsnorm_heads(qk.gpu, hd, hw.gpu, 1e-6f);
  expect_close(qk, 1e-2, "rmsnorm_heads on a strided view");
}

TEST_F(CudaKernel, RopeBothLayouts) {
  Seqs s = seqs({5, 70, 130});
  const int64_t M = s.cpu.num_tokens;
  const int heads = 3, hd = 48, rot = 16, off = 32, half = rot / 2, positions = 256;
  std::vector<float> cos_t(positions * half), sin_t(positions * half);
  for (int p = 0; p < positions; ++p)
    for (int i = 0; i < half; ++i) {
      cos_t[p * half + i] = std::cos(p * std::pow(100.0f, -i / static_cast<float>(half))) * 1.1f;
      sin_t[p * half + i] = std::sin(p * std::pow(100.0f, -i / static_cast<float>(half))) * 1.1f;
    }
  Pair c = make(positions, half, cos_t, DType::F32), sn = make(positions, half, sin_t, DType::F32);
  for (bool interleaved : {false, true}) {
    Pair x = make(M, heads * hd, bf16_rounded(M * heads * hd, 12));
    RopeParams p{heads, hd, off, rot, interleaved};
    cpu_->rope(x.cpu, p, {c.cpu, sn.cpu}, s.cpu);
    gpu_->rope(x.gpu, p, {c.gpu, sn.gpu}, s.gpu);
    expect_close(x, 1e-2, interleaved ? "interleaved" : "half-split");
  }
}

bool runs_wgmma(const Backend& gpu) { return gpu.device_description().find("wgmma grouped GEMM") != std::string::npos; }

struct AttentionCase {
  int dqk, dv, q_heads, kv_heads;
  int64_t window;
};

class CudaAttention : public CudaKernel, public ::testing::WithParamInterface<AttentionCase> {
 protected:
  // Each attention kernel this GPU runs: the mma.sync one everywhere, the wgmma one on Hopper,
  // each against the CPU twin, and the two against each other bit for bit (they share the
  // softmax step, and a run's bits must not depend on which kernel the GPU picked).
  void check_every_kernel() {
    std::vector<int> variants{CudaOptions::kMmaSyncAttention};
    if (runs_wgmma(*gpu_)) variants.push_back(CudaOptions::kWgmmaAttention);
    std::vector<float> first;
    for (int variant : variants) {
      CudaOptions o;
      o.attention_variant = variant;
      gpu_ = make_cuda_backend(0, o);
      std::vector<float> got = check();
      if (first.empty()) {
        first = std::move(got);
        continue;
      }
      ASSERT_EQ(got.size(), first.size());
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &first[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0u) << "attention variant " << variant << " differs from the mma.sync kernel in " << differ
                            << " of " << got.size() << " values";
    }
  }
  std::vector<float> check();  // the GPU's output
};

std::vector<float> CudaAttention::check() {
  const AttentionCase ac = GetParam();
  // 330: three 128-query blocks, six key tiles; 1000: a block whose two halves visit different
  // tile counts, and windows that start past the first tile.
  Seqs s = seqs({1, 63, 64, 65, 200, 17, 330, 1000});
  const int64_t M = s.cpu.num_tokens;
  const int64_t qn = int64_t{ac.q_heads} * ac.dqk, kn = int64_t{ac.kv_heads} * ac.dqk, vn = int64_t{ac.kv_heads} * ac.dv;
  // q, k, v as column slices of one fused buffer, as the model lays them out.
  const int64_t width = qn + kn + vn;
  std::vector<float> all = bf16_rounded(static_cast<size_t>(M * width), 13, 2.0f);
  Pair fused = make(M, width, all);
  Tensor qc = fused.cpu.col_slice(0, qn), kc = fused.cpu.col_slice(qn, kn), vc = fused.cpu.col_slice(qn + kn, vn);
  Tensor qg = fused.gpu.col_slice(0, qn), kg = fused.gpu.col_slice(qn, kn), vg = fused.gpu.col_slice(qn + kn, vn);
  Pair out = poisoned(M, int64_t{ac.q_heads} * ac.dv);
  AttentionParams p;
  p.num_q_heads = ac.q_heads;
  p.num_kv_heads = ac.kv_heads;
  p.qk_head_dim = ac.dqk;
  p.v_head_dim = ac.dv;
  p.scale = 1.0f / std::sqrt(static_cast<float>(ac.dqk));
  p.sliding_window = ac.window;
  cpu_->attention(qc, kc, vc, out.cpu, p, s.cpu);
  gpu_->attention(qg, kg, vg, out.gpu, p, s.gpu);
  expect_close(out, 1.5e-2, fmt::format("{}: qk {} v {} heads {}/{} window {}", gpu_->device_description(), ac.dqk,
                                         ac.dv, ac.q_heads, ac.kv_heads, ac.window));
  return host(*gpu_, out.gpu);
}

TEST_P(CudaAttention, MatchesTheCpuTwin) { check_every_kernel(); }

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(AttentionCase{32, 32, 4, 2, 0}, AttentionCase{64, 64, 2, 2, 0},
                                           AttentionCase{128, 128, 4, 1, 0}, AttentionCase{192, 128, 2, 2, 0},
                                           AttentionCase{24, 16, 2, 2, 0}, AttentionCase{48, 32, 3, 3, 0},
                                           AttentionCase{16, 16, 8, 4, 0}, AttentionCase{96, 96, 2, 1, 0},
                                           AttentionCase{32, 32, 4, 2, 24}, AttentionCase{128, 128, 2, 2, 100},
                                           AttentionCase{192, 128, 4, 4, 300}, AttentionCase{128, 64, 2, 1, 0}));

TEST_F(CudaKernel, ElementwiseOps) {
  const int64_t M = 45, C = 136;
  for (int64_t cols : {C, int64_t{36}}) {  // eight columns per thread, and the one-by-one fallback
    Pair g = make(M, cols, bf16_rounded(M * cols, 14, 3.0f), DType::BF16, 2 * cols);
    Pair u = make(M, cols, bf16_rounded(M * cols, 15));
    Pair o = poisoned(M, cols);
    cpu_->silu_mul(g.cpu, u.cpu, o.cpu);
    gpu_->silu_mul(g.gpu, u.gpu, o.gpu);
    expect_close(o, 1e-2, fmt::format("silu_mul, {} columns", cols));
  }

  Pair a = make(M, C, bf16_rounded(M * C, 16)), b = make(M, C, bf16_rounded(M * C, 17)), bias = make(1, C, bf16_rounded(C, 18));
  cpu_->add_inplace(a.cpu, b.cpu);
  gpu_->add_inplace(a.gpu, b.gpu);
  cpu_->add_bias(a.cpu, bias.cpu);
  gpu_->add_bias(a.gpu, bias.gpu);
  expect_close(a, 1e-2, "add and add_bias");

  const int64_t V = 50;
  Pair table = make(V, C, bf16_rounded(V * C, 19));
  std::vector<int32_t> idv;
  for (int i = 0; i < M; ++i) idv.push_back((i * 7) % V);
  Pair ids = ints(idv), e = poisoned(M, C, DType::F32);
  cpu_->embedding(ids.cpu, table.cpu, e.cpu);
  gpu_->embedding(ids.gpu, table.gpu, e.gpu);
  expect_close(e, 1e-7, "embedding into the fp32 residual is exact");
  Pair acc = make(M, C, test::random_floats(M * C, 27), DType::F32), add = make(M, C, test::random_floats(M * C, 28), DType::F32);
  cpu_->add_inplace(acc.cpu, add.cpu);
  gpu_->add_inplace(acc.gpu, add.gpu);
  expect_close(acc, 1e-7, "fp32 add");

  // 16-byte pieces, and (a head width not a multiple of 8) one value at a time
  for (auto [heads, nope, vd, rope] : {std::tuple{3, 16, 24, 8}, std::tuple{3, 12, 20, 8}}) {
    Pair kv = make(M, heads * (nope + vd), bf16_rounded(M * heads * (nope + vd), 20));
    Pair rot = make(M, rope, bf16_rounded(M * rope, 21), DType::BF16, 40);
    Pair k = poisoned(M, heads * (nope + rope)), v = poisoned(M, heads * vd);
    cpu_->mla_expand_kv(kv.cpu, rot.cpu, heads, nope, vd, k.cpu, v.cpu);
    gpu_->mla_expand_kv(kv.gpu, rot.gpu, heads, nope, vd, k.gpu, v.gpu);
    expect_close(k, 1e-7, fmt::format("mla k, nope {}", nope));
    expect_close(v, 1e-7, fmt::format("mla v, nope {}", nope));
  }
}

TEST_F(CudaKernel, RouterPicksTheSameExperts) {
  const int64_t M = 300;
  for (auto [select, scoring, groups, topk_group] :
       {std::tuple{RouterSelect::Greedy, RouterScoring::Softmax, 1, 1},
        std::tuple{RouterSelect::GroupLimitedGreedy, RouterScoring::Softmax, 4, 2},
        std::tuple{RouterSelect::NoAuxTc, RouterScoring::Sigmoid, 8, 3},
        std::tuple{RouterSelect::NoAuxTc, RouterScoring::Sigmoid, 1, 1}}) {
    RouterParams p;
    p.num_experts = 64;
    p.top_k = 6;
    p.n_group = groups;
    p.topk_group = topk_group;
    p.select = select;
    p.scoring = scoring;
    p.norm_topk_prob = true;
    p.routed_scaling_factor = 2.5f;
    Pair logits = make(M, 64, test::random_floats(M * 64, 22), DType::F32);
    Pair bias = make(1, 64, test::random_floats(64, 23), DType::F32);
    std::vector<int32_t> zeros(M * 6, -1);
    Pair ids = ints(zeros);
    ids.cpu = ids.cpu.reshaped(6);
    ids.gpu = ids.gpu.reshaped(6);
    Pair w = poisoned(M, 6, DType::F32);
    cpu_->moe_route(logits.cpu, &bias.cpu, p, ids.cpu, w.cpu);
    gpu_->moe_route(logits.gpu, &bias.gpu, p, ids.gpu, w.gpu);
    std::vector<int32_t> cpu_ids(M * 6), gpu_ids(M * 6);
    std::memcpy(cpu_ids.data(), ids.cpu.data, cpu_ids.size() * 4);
    gpu_->synchronize();
    std::vector<float> as_float = host(*gpu_, Tensor(ids.gpu.data, DType::F32, M, 6));  // raw bits, compared below
    std::memcpy(gpu_ids.data(), as_float.data(), gpu_ids.size() * 4);
    EXPECT_EQ(cpu_ids, gpu_ids) << "select " << static_cast<int>(select);
    expect_close(w, 1e-6, "router weights");
  }
}

TEST_F(CudaKernel, HopperGpusRunTheWgmmaGroupedGemm) {
  const std::string d = gpu_->device_description();
  if (d.find("sm_90,") == std::string::npos) GTEST_SKIP() << "not an sm_90 GPU: " << d;
  EXPECT_TRUE(runs_wgmma(*gpu_)) << d << ": the build lacks the sm_90a image (CMAKE_CUDA_ARCHITECTURES without 90a)";
  EXPECT_NE(d.find("wgmma attention"), std::string::npos) << d << ": the default attention on Hopper is the wgmma one";
}

TEST_F(CudaKernel, TheL2ProbeFindsTheTwoHalvesOfAHopperL2) {
  // H100 and H200 join two L2 partitions by a link; each SM sits beside one. The probe must find
  // both halves, each with a fair share of the SMs, and the same halves when it runs again.
  const std::string d = gpu_->device_description();
  if (d.find("H100") == std::string::npos && d.find("H200") == std::string::npos)
    GTEST_SKIP() << "not an H100 or H200: " << d;
  const L2Sides a = find_l2_sides(0), b = find_l2_sides(0);
  std::string map;
  for (int sm = 0; sm < a.sms[0] + a.sms[1]; ++sm) map += static_cast<char>('0' + a.side_of_sm[sm]);
  std::cout << "L2 sides by SM: " << map << " (" << a.sms[0] << " + " << a.sms[1] << ", weakest correlation "
            << a.weakest << "; again " << b.sms[0] << " + " << b.sms[1] << ", " << b.weakest << ")\n";
  // What it saw, for the record: each SM's score and spread of cold latencies, and the first two
  // SMs' latencies line by line.
  const size_t lines = a.sm_ids.empty() ? 0 : a.cycles.size() / a.sm_ids.size();
  for (size_t t = 0; t < a.sm_ids.size(); ++t) {
    std::cout << fmt::format("sm {:3} score {:+.3f}", a.sm_ids[t], a.score[t]);
    for (size_t half = 0; half < 2; ++half) {  // each line cold, then warm
      const size_t h = lines / 2;
      std::vector<unsigned> c(a.cycles.begin() + t * lines + half * h, a.cycles.begin() + t * lines + (half + 1) * h);
      std::sort(c.begin(), c.end());
      std::cout << fmt::format(" {} p10 {} median {} p90 {} max {}", half ? "warm" : "cold", c[h / 10], c[h / 2],
                               c[h * 9 / 10], c.back());
    }
    std::cout << '\n';
  }
  for (size_t t = 0; t < std::min<size_t>(2, a.sm_ids.size()); ++t) {
    std::cout << "sm " << a.sm_ids[t] << " lines:";
    for (size_t i = 0; i < lines; ++i) std::cout << ' ' << a.cycles[t * lines + i];
    std::cout << '\n';
  }
  EXPECT_TRUE(a.found) << "weakest correlation " << a.weakest;
  const int sms = a.sms[0] + a.sms[1];
  EXPECT_GE(std::min(a.sms[0], a.sms[1]), sms / 4) << a.sms[0] << " + " << a.sms[1];
  int same = 0;
  for (int sm = 0; sm < kL2SideSlots; ++sm) same += a.side_of_sm[sm] == b.side_of_sm[sm];
  EXPECT_GE(same, kL2SideSlots - sms / 20) << "the second probe moved SMs";
}

TEST_F(CudaKernel, ExpertsOfOneRankMatchTheCpuTwin) {
  // Every grouped-GEMM kernel and tile shape (4-8: the Hopper wgmma kernels), with and without
  // the silu fused into its epilogue; experts with more rows than one 128-row tile, K shorter
  // than one k-tile and longer than the pipeline, N across several column tiles with a
  // partial last one.
  std::vector<int> variants{0, 1, 2, 3};
  if (runs_wgmma(*gpu_)) {
    variants.push_back(CudaOptions::kHopperGemmVariant);
    variants.push_back(CudaOptions::kHopperWsGemmVariant);
    variants.push_back(CudaOptions::kHopperWsShortKGemmVariant);
    variants.push_back(CudaOptions::kHopperWsSlabMajorGemmVariant);
    variants.push_back(CudaOptions::kHopperWsCountedGemmVariant);
    variants.push_back(CudaOptions::kHopperWsCountedRegsGemmVariant);
  }
  for (int variant : variants)
    for (bool unfused : {false, true}) {
      gpu_ = make_cuda_backend(0, CudaOptions{variant, unfused});
      SCOPED_TRACE(fmt::format("variant {} unfused {}", variant, unfused));
      check_experts(150, 64, 48);
      check_experts(700, 96, 40);
      check_experts(1100, 328, 200);
    }
}

TEST_F(CudaKernel, AskingForTheHopperGemmWhereItIsMissingIsAUsageError) {
  if (runs_wgmma(*gpu_)) GTEST_SKIP() << "this GPU runs the wgmma grouped GEMM";
  try {
    make_cuda_backend(0, CudaOptions{CudaOptions::kHopperGemmVariant, false});
    FAIL() << "E3_GEMM_VARIANT=4 was accepted";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("E3_GEMM_VARIANT"), std::string::npos) << e.what();
  }
}

TEST_F(CudaKernel, AskingForTheWgmmaAttentionWhereItIsMissingIsAUsageError) {
  if (runs_wgmma(*gpu_)) GTEST_SKIP() << "this GPU runs the wgmma kernels";
  CudaOptions o;
  o.attention_variant = CudaOptions::kWgmmaAttention;
  try {
    make_cuda_backend(0, o);
    FAIL() << "E3_ATTENTION_VARIANT=1 was accepted";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("E3_ATTENTION_VARIANT"), std::string::npos) << e.what();
  }
}

TEST_F(CudaKernel, WalkingByL2SideWithoutTheCountedWalkIsAUsageError) {
  // E3_L2_SIDES steers only the counted walks (8, 9): with any other kernel it would do nothing,
  // so it is refused rather than ignored, on every GPU.
  for (int mode : {CudaOptions::kProbedL2Sides, CudaOptions::kParityL2Sides}) {
    CudaOptions o{0, false};  // the portable grouped GEMM
    o.l2_sides = mode;
    try {
      make_cuda_backend(0, o);
      FAIL() << "E3_L2_SIDES=" << mode << " was accepted with E3_GEMM_VARIANT=0";
    } catch (const e3::Error& e) {
      EXPECT_EQ(e.kind(), e3::ErrorKind::Usage);
      EXPECT_NE(std::string(e.what()).find("E3_L2_SIDES"), std::string::npos) << e.what();
    }
  }
}

// A quantized stack in host memory (the CPU backend's) and the same bytes on the GPU.
struct QuantPair {
  std::vector<uint8_t> q, scale;
  QuantStack cpu, gpu;
  DeviceBuffer gq, gs;
};

QuantPair make_quant(Backend& gpu, QuantStack::Format format, ScaleType scale_type, int64_t count, int64_t rows,
                     int64_t cols, uint64_t seed, int64_t row_offset = 0, int64_t col_offset = 0,
                     int64_t group_or_block = 0) {
  QuantPair p;
  QuantStack w;
  if (group_or_block > 0) {  // the INT4 group, or the FP8 block's rows and columns
    w.group = group_or_block;
    w.block_rows = w.block_cols = group_or_block;
  }
  w.row_offset = row_offset;
  w.col_offset = col_offset;
  w.format = format;
  w.scale_type = scale_type;
  w.count = count;
  w.rows = rows;
  w.cols = cols;
  p.q.resize(static_cast<size_t>(count) * w.matrix_q_bytes());
  p.scale.resize(static_cast<size_t>(count) * w.matrix_scale_bytes());
  p.cpu = w;
  p.cpu.q = p.q.data();
  p.cpu.scale = p.scale.data();
  fill_random_quant_host(p.cpu, seed);
  p.gq = gpu.allocate(p.q.size());
  p.gs = gpu.allocate(p.scale.size());
  gpu.upload_raw(Tensor{p.gq.data(), DType::U8, 1, static_cast<int64_t>(p.q.size())}, p.q.data());
  gpu.upload_raw(Tensor{p.gs.data(), DType::U8, 1, static_cast<int64_t>(p.scale.size())}, p.scale.data());
  p.gpu = w;
  p.gpu.q = p.gq.data();
  p.gpu.scale = p.gs.data();
  return p;
}

TEST_F(CudaKernel, DequantizeMatchesTheCpuTwinExactly) {
  // Rows and columns that are not multiples of the 128 x 128 FP8 blocks or of the INT4 group;
  // three matrices, so that every matrix's scales restart.
  struct Case {
    QuantStack::Format format;
    ScaleType scale_type;
    int64_t rows, cols, row_offset = 0, col_offset = 0;
  };
  for (const Case& c : {Case{QuantStack::Format::Fp8Block, ScaleType::F32, 130, 200},
                        Case{QuantStack::Format::Fp8Block, ScaleType::BF16, 257, 72},
                        Case{QuantStack::Format::Int4Group, ScaleType::BF16, 70, 200},
                        Case{QuantStack::Format::Int4Group, ScaleType::BF16, 33, 40},
                        // columns not a multiple of 8: the one-value-per-thread kernels
                        Case{QuantStack::Format::Fp8Block, ScaleType::F32, 50, 70},
                        Case{QuantStack::Format::Int4Group, ScaleType::BF16, 9, 36},
                        // a tensor-parallel slice starting inside a block
                        Case{QuantStack::Format::Fp8Block, ScaleType::F32, 100, 96, 64, 40},
                        Case{QuantStack::Format::Fp8Block, ScaleType::BF16, 100, 96, 1, 36}}) {
    SCOPED_TRACE(fmt::format("format {} rows {} cols {}", static_cast<int>(c.format), c.rows, c.cols));
    QuantPair w = make_quant(*gpu_, c.format, c.scale_type, 3, c.rows, c.cols, 77, c.row_offset, c.col_offset);
    Pair out = poisoned(3 * c.rows, c.cols);
    cpu_->dequantize(w.cpu, out.cpu);
    gpu_->dequantize(w.gpu, out.gpu);
    const std::vector<float> want = host(*cpu_, out.cpu), got = host(*gpu_, out.gpu);
    ASSERT_EQ(got.size(), want.size());
    size_t differ = 0, nonfinite = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      differ += got[i] != want[i];
      nonfinite += !std::isfinite(got[i]);
    }
    EXPECT_EQ(differ, 0u) << "of " << got.size();
    EXPECT_EQ(nonfinite, 0u);
  }
}

TEST_F(CudaKernel, TheWarpSpecialisedGemmGivesTheCpAsyncKernelsBits) {
  // Both Hopper kernels sum every output's k-tiles in the same order, so their bits agree, for
  // bf16 and kept-quantized experts, with and without the silu fused. Enough tiles that each
  // persistent block of the warp-specialised kernel walks several, with partial m- and n-tiles
  // and K not a multiple of the 64-column k-tile for bf16 (the quantized path needs one).
  if (!runs_wgmma(*gpu_)) GTEST_SKIP() << "no sm_90a image for this GPU";
  const int E = 16, local = 8, first = 8, K = 4;
  const int64_t M = 5000;
  auto [ids, w] = routing(M, K, E);
  {
    const int64_t H = 520, I = 648;  // k of the down GEMM 648 = 10 k-tiles and 8 columns
    Pair x = make(M, H, bf16_rounded(M * H, 61));
    Pair gate_up = make(local * 2 * I, H, bf16_rounded(local * 2 * I * H, 62, 0.3f));
    Pair down = make(local * H, I, bf16_rounded(local * H * I, 63, 0.3f));
    const ExpertStack eg{gate_up.gpu, down.gpu, first, local, I, {}, {}};
    for (bool unfused : {false, true}) {
      SCOPED_TRACE(fmt::format("bf16 experts, unfused {}", unfused));
      const std::vector<float> ws = experts_on(CudaOptions::kHopperWsGemmVariant, unfused, false, x, ids, w, eg);
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperGemmVariant, unfused, false, x, ids, w, eg));
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperWsShortKGemmVariant, unfused, false, x, ids, w, eg))
          << "32-column k-tiles";
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperWsSlabMajorGemmVariant, unfused, false, x, ids, w, eg))
          << "n-tile major";
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperWsCountedGemmVariant, unfused, false, x, ids, w, eg))
          << "tiles from a counter";
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperWsCountedGemmVariant, unfused, false, x, ids, w, eg,
                               CudaOptions::kParityL2Sides))
          << "tiles from both ends of the counter";
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperWsCountedGemmVariant, unfused, false, x, ids, w, eg,
                               CudaOptions::kProbedL2Sides))
          << "tiles by the L2 sides the probe found";
    }
  }
  const int64_t H = 512, I = 704;
  Pair x = make(M, H, bf16_rounded(M * H, 64));
  for (auto format : {QuantStack::Format::Fp8Block, QuantStack::Format::Int4Group}) {
    QuantPair gu = make_quant(*gpu_, format, ScaleType::F32, 2 * local, I, H, 65);
    QuantPair dn = make_quant(*gpu_, format, ScaleType::F32, local, H, I, 66);
    const ExpertStack eg{Tensor{}, Tensor{}, first, local, I, gu.gpu, dn.gpu};
    for (bool unfused : {false, true}) {
      SCOPED_TRACE(fmt::format("format {}, unfused {}", static_cast<int>(format), unfused));
      const std::vector<float> ws = experts_on(CudaOptions::kHopperWsGemmVariant, unfused, true, x, ids, w, eg);
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperGemmVariant, unfused, true, x, ids, w, eg));
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperWsSlabMajorGemmVariant, unfused, true, x, ids, w, eg))
          << "n-tile major";
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperWsCountedGemmVariant, unfused, true, x, ids, w, eg))
          << "tiles from a counter";
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperWsCountedRegsGemmVariant, unfused, true, x, ids, w, eg))
          << "the weights as the register operand";
      EXPECT_EQ(ws, experts_on(CudaOptions::kHopperWsCountedRegsGemmVariant, unfused, true, x, ids, w, eg,
                               CudaOptions::kParityL2Sides))
          << "the register operand, tiles from both ends of the counter";
    }
  }
}

TEST_F(CudaKernel, AnExpertsLastMTileOfAnyHeightGivesTheSameBits) {
  // The warp-specialised kernel runs a bf16 expert's last m-tile of 112 rows or fewer transposed,
  // its tokens as the MMA's N rounded up to 16 (variant 9 always runs transposed, 128 tokens); the
  // cp.async kernel pads every m-tile to 128 rows.
  // Heights on and around each step of 16, and over one and two whole m-tiles, give the same bits
  // in every bf16 walk of the warp-specialised kernel and in its register-operand form for INT4 and
  // FP8 experts, with and without the silu fused.
  if (!runs_wgmma(*gpu_)) GTEST_SKIP() << "no sm_90a image for this GPU";
  const std::vector<int> heights = {1, 15, 16, 17, 40, 63, 64, 65, 96, 111, 112, 113, 127, 128, 129, 250};
  const int E = static_cast<int>(heights.size()), K = 1;
  int64_t M = 0;
  for (int h : heights) M += h;
  // Expert e's rows are tokens spread over the batch (a stride coprime to M), so that the gather
  // of the tokens is exercised as well as the heights.
  std::vector<int32_t> ids(static_cast<size_t>(M));
  std::vector<float> weights(static_cast<size_t>(M));
  int64_t next = 0;
  for (int e = 0; e < E; ++e)
    for (int r = 0; r < heights[static_cast<size_t>(e)]; ++r, ++next) {
      const auto token = static_cast<size_t>((next * 7919) % M);
      ids[token] = e;
      weights[token] = 0.5f + 0.01f * static_cast<float>(r % 9);
    }
  ASSERT_LT(M, 7919);  // 7919 is prime, so the stride visits every token once
  Pair id = ints(ids);
  id.cpu = id.cpu.reshaped(K);
  id.gpu = id.gpu.reshaped(K);
  Pair w = make(M, K, weights, DType::F32);
  const int64_t H = 520, I = 648;  // partial n-tiles of both GEMMs, K not a multiple of 64
  Pair x = make(M, H, bf16_rounded(M * H, 81));
  Pair gate_up = make(E * 2 * I, H, bf16_rounded(E * 2 * I * H, 82, 0.3f));
  Pair down = make(E * H, I, bf16_rounded(E * H * I, 83, 0.3f));
  const ExpertStack eg{gate_up.gpu, down.gpu, 0, E, I, {}, {}};
  for (bool unfused : {false, true}) {
    SCOPED_TRACE(fmt::format("unfused {}", unfused));
    const std::vector<float> padded = experts_on(CudaOptions::kHopperGemmVariant, unfused, false, x, id, w, eg);
    for (int variant : {CudaOptions::kHopperWsGemmVariant, CudaOptions::kHopperWsShortKGemmVariant,
                        CudaOptions::kHopperWsSlabMajorGemmVariant, CudaOptions::kHopperWsCountedGemmVariant})
      EXPECT_EQ(padded, experts_on(variant, unfused, false, x, id, w, eg)) << "variant " << variant;
  }
  // The quantized experts' register-operand kernel (variant 9) takes N from the same steps.
  const int64_t QH = 512, QI = 704;
  Pair qx = make(M, QH, bf16_rounded(M * QH, 84));
  for (auto format : {QuantStack::Format::Fp8Block, QuantStack::Format::Int4Group}) {
    QuantPair gu = make_quant(*gpu_, format, ScaleType::F32, 2 * E, QI, QH, 85);
    QuantPair dn = make_quant(*gpu_, format, ScaleType::F32, E, QH, QI, 86);
    const ExpertStack qeg{Tensor{}, Tensor{}, 0, E, QI, gu.gpu, dn.gpu};
    for (bool unfused : {false, true}) {
      SCOPED_TRACE(fmt::format("format {}, unfused {}", static_cast<int>(format), unfused));
      EXPECT_EQ(experts_on(CudaOptions::kHopperGemmVariant, unfused, true, qx, id, w, qeg),
                experts_on(CudaOptions::kHopperWsCountedRegsGemmVariant, unfused, true, qx, id, w, qeg));
    }
  }
}

TEST_F(CudaKernel, QuantizedExpertsInTheGemmTakeGroupsAndBlocksOfAnyWidth) {
  // INT4 groups of 96 columns and FP8 blocks of 192 x 192, widths that are no powers of two, so
  // that the kernels find a k-tile's scales by division rather than by a shift: variant 9 gives
  // the cp.async kernel's bits.
  if (!runs_wgmma(*gpu_)) GTEST_SKIP() << "no sm_90a image for this GPU";
  const int E = 16, local = 8, first = 8, K = 4;
  const int64_t M = 700, H = 576, I = 384;
  auto [ids, w] = routing(M, K, E);
  Pair x = make(M, H, bf16_rounded(M * H, 71));
  for (auto [format, width] : {std::pair{QuantStack::Format::Int4Group, int64_t{96}},
                               std::pair{QuantStack::Format::Fp8Block, int64_t{192}}}) {
    QuantPair gu = make_quant(*gpu_, format, ScaleType::F32, 2 * local, I, H, 72, 0, 0, width);
    QuantPair dn = make_quant(*gpu_, format, ScaleType::F32, local, H, I, 73, 0, 0, width);
    const ExpertStack eg{Tensor{}, Tensor{}, first, local, I, gu.gpu, dn.gpu};
    for (bool unfused : {false, true}) {
      SCOPED_TRACE(fmt::format("format {}, width {}, unfused {}", static_cast<int>(format), width, unfused));
      EXPECT_EQ(experts_on(CudaOptions::kHopperGemmVariant, unfused, true, x, ids, w, eg),
                experts_on(CudaOptions::kHopperWsCountedRegsGemmVariant, unfused, true, x, ids, w, eg))
          << "the register-operand kernel differs from the cp.async kernel";
    }
  }
}

TEST_F(CudaKernel, QuantizedExpertsMatchTheCpuTwin) {
  // The GPU keeps the experts quantized: moe_experts either dequantizes them into scratch or
  // (--expert-dequant gemm, on Hopper, k a multiple of 64) converts the B tiles in its GEMMs. The CPU twin runs
  // on the dequantized weights. Both GPU paths, with and without the silu fused.
  struct Case {
    int64_t H, I;
    bool in_gemm;         // --expert-dequant gemm
    bool unfused;  // E3_MOE_UNFUSED
  };
  // On Hopper both ways of converting in the GEMM: into shared memory (8) and into wgmma's
  // register operand (9).
  std::vector<int> variants{CudaOptions::kAutoGemmVariant};
  if (runs_wgmma(*gpu_)) variants = {CudaOptions::kHopperWsCountedGemmVariant, CudaOptions::kHopperWsCountedRegsGemmVariant};
  for (int variant : variants)
    for (const Case& c : {Case{128, 96, true, false}, Case{256, 192, true, false}, Case{256, 192, false, false},
                          Case{256, 192, true, true}}) {
      SCOPED_TRACE(fmt::format("variant {}", variant));
      gpu_ = make_cuda_backend(0, CudaOptions{variant, c.unfused});
      gpu_->set_quantized_experts_in_gemm(c.in_gemm);
      check_quantized_experts(c.H, c.I, c.in_gemm);
    }
}

void CudaKernel::check_quantized_experts(int64_t H, int64_t I, bool want_in_gemm) {
  const int64_t M = 300;
  const int E = 16, local = 8, first = 8, K = 4;
  Pair x = make(M, H, bf16_rounded(M * H, 51));
  auto [ids, w] = routing(M, K, E);
  for (auto format : {QuantStack::Format::Fp8Block, QuantStack::Format::Int4Group}) {
    QuantPair gu = make_quant(*gpu_, format, ScaleType::F32, 2 * local, I, H, 52);
    QuantPair dn = make_quant(*gpu_, format, ScaleType::F32, local, H, I, 53);
    DeviceBuffer gu_cpu = cpu_->allocate(static_cast<size_t>(2 * local * I * H) * 4);
    DeviceBuffer dn_cpu = cpu_->allocate(static_cast<size_t>(local * H * I) * 4);
    ExpertStack ec{gu_cpu.view(DType::F32, 2 * local * I, H), dn_cpu.view(DType::F32, local * H, I), first, local, I,
                   {}, {}};
    cpu_->dequantize(gu.cpu, ec.gate_up);
    cpu_->dequantize(dn.cpu, ec.down);
    ExpertStack eg{Tensor{}, Tensor{}, first, local, I, gu.gpu, dn.gpu};
    const bool in_gemm = gpu_->reads_quantized_experts(eg);
    if (runs_wgmma(*gpu_) && H % 64 == 0 && I % 64 == 0 && want_in_gemm) {
      EXPECT_TRUE(in_gemm) << "the Hopper GEMM should read these experts quantized";
    }
    SCOPED_TRACE(fmt::format("format {} H {} I {}: {}", static_cast<int>(format), H, I,
                             in_gemm ? "converted in the GEMM" : "dequantized into scratch"));
    Pair out = poisoned(M, H, DType::F32);
    const MoeScratchShape cshape{K, local, H, I, false}, gshape{K, local, H, I, !in_gemm};
    DeviceBuffer cs = cpu_->allocate(cpu_->moe_scratch_bytes(M, cshape));
    DeviceBuffer gs = gpu_->allocate(gpu_->moe_scratch_bytes(M, gshape));
    cpu_->moe_experts(x.cpu, ids.cpu, w.cpu, ec, out.cpu, Tensor{}, cs.view(DType::I32, 1, static_cast<int64_t>(cs.bytes() / 4)));
    gpu_->moe_experts(x.gpu, ids.gpu, w.gpu, eg, out.gpu, Tensor{}, gs.view(DType::I32, 1, static_cast<int64_t>(gs.bytes() / 4)));
    expect_close(out, 1.5e-2, "quantized experts");
    if (in_gemm) {
      // Converting in the GEMM gives the bf16 weights the dequantize kernel gives: the same
      // kernel on them must produce the same bits.
      const std::vector<float> direct = host(*gpu_, out.gpu);
      gpu_->set_quantized_experts_in_gemm(false);
      DeviceBuffer gs2 = gpu_->allocate(gpu_->moe_scratch_bytes(M, MoeScratchShape{K, local, H, I, true}));
      gpu_->moe_experts(x.gpu, ids.gpu, w.gpu, eg, out.gpu, Tensor{},
                        gs2.view(DType::I32, 1, static_cast<int64_t>(gs2.bytes() / 4)));
      gpu_->set_quantized_experts_in_gemm(true);
      EXPECT_EQ(direct, host(*gpu_, out.gpu)) << "in-GEMM conversion differs from the dequantize kernel";
    }
  }
}

void CudaKernel::check_experts(int64_t M, int64_t H, int64_t I) {
  const int E = 16, local = 8, first = 8, K = 4;
  Pair x = make(M, H, bf16_rounded(M * H, 24));
  Pair gate_up = make(local * 2 * I, H, bf16_rounded(local * 2 * I * H, 25, 0.3f));
  Pair down = make(local * H, I, bf16_rounded(local * H * I, 26, 0.3f));
  auto [ids, w] = routing(M, K, E);
  Pair out = poisoned(M, H, DType::F32);
  const MoeScratchShape shape{K, local, H, I};
  DeviceBuffer cs = cpu_->allocate(cpu_->moe_scratch_bytes(M, shape));
  DeviceBuffer gs = gpu_->allocate(gpu_->moe_scratch_bytes(M, shape));
  ExpertStack ec{gate_up.cpu, down.cpu, first, local, I, {}, {}}, eg{gate_up.gpu, down.gpu, first, local, I, {}, {}};
  cpu_->moe_experts(x.cpu, ids.cpu, w.cpu, ec, out.cpu, Tensor{}, cs.view(DType::I32, 1, static_cast<int64_t>(cs.bytes() / 4)));
  gpu_->moe_experts(x.gpu, ids.gpu, w.gpu, eg, out.gpu, Tensor{}, gs.view(DType::I32, 1, static_cast<int64_t>(gs.bytes() / 4)));
  expect_close(out, 1.5e-2, "moe experts");

  // With the shared experts' output given, each backend's out is its routed sum plus that
  // output, rounded once: the bits of a separate add.
  const std::vector<float> routed_cpu = host(*cpu_, out.cpu), routed_gpu = host(*gpu_, out.gpu);
  Pair shared = make(M, H, test::random_floats(M * H, 27), DType::F32);
  Pair with_shared = poisoned(M, H, DType::F32);
  cpu_->moe_experts(x.cpu, ids.cpu, w.cpu, ec, with_shared.cpu, shared.cpu,
                    cs.view(DType::I32, 1, static_cast<int64_t>(cs.bytes() / 4)));
  gpu_->moe_experts(x.gpu, ids.gpu, w.gpu, eg, with_shared.gpu, shared.gpu,
                    gs.view(DType::I32, 1, static_cast<int64_t>(gs.bytes() / 4)));
  const std::vector<float> added = host(*cpu_, shared.cpu);
  std::vector<float> want_cpu(routed_cpu.size()), want_gpu(routed_gpu.size());
  for (size_t i = 0; i < added.size(); ++i) {
    want_cpu[i] = routed_cpu[i] + added[i];
    want_gpu[i] = routed_gpu[i] + added[i];
  }
  EXPECT_EQ(host(*cpu_, with_shared.cpu), want_cpu) << "cpu: routed + shared";
  EXPECT_EQ(host(*gpu_, with_shared.gpu), want_gpu) << "gpu: routed + shared";

  // The same values as a column slice of a wider buffer (odd stride, not 16-byte aligned): the
  // combine's scalar path.
  std::vector<float> wide(static_cast<size_t>(M * (H + 1)));
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < H; ++c) wide[static_cast<size_t>(r * (H + 1) + 1 + c)] = added[static_cast<size_t>(r * H + c)];
  Pair shared_wide = make(M, H + 1, wide, DType::F32);
  Pair sliced = poisoned(M, H, DType::F32);
  gpu_->moe_experts(x.gpu, ids.gpu, w.gpu, eg, sliced.gpu, shared_wide.gpu.col_slice(1, H),
                    gs.view(DType::I32, 1, static_cast<int64_t>(gs.bytes() / 4)));
  EXPECT_EQ(host(*gpu_, sliced.gpu), want_gpu) << "gpu: routed + a strided shared";
}

}  // namespace
}  // namespace e3::kernels

namespace e3::kernels {
namespace {

// --dtype fp8: the GPU's encode must give the CPU's bytes exactly, from fp32 and from bf16
// captures, for every case the encoder distinguishes: values over many binades (normal and
// subnormal codes, ties), amax 0, a row whose amax / 448 underflows, NaN and infinity (the
// first non-finite column, wherever it falls in the block's reduction), H not a multiple of the
// block, and a strided source.
TEST_F(CudaKernel, EncodeE4m3MatchesTheCpuTwinBitForBit) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t H : {int64_t{7}, int64_t{256}, int64_t{1000}, int64_t{7168}}) {
    const int64_t rows = 9, stride = H + 3;
    std::vector<float> v = e3::test::random_floats(static_cast<size_t>(rows * H), static_cast<uint64_t>(H));
    for (int64_t i = 0; i < rows * H; ++i) v[static_cast<size_t>(i)] *= std::ldexp(1.0f, static_cast<int>(i % 30) - 15);
    auto at = [&](int64_t r, int64_t c) -> float& { return v[static_cast<size_t>(r * H + c)]; };
    for (int64_t c = 0; c < H; ++c) {
      at(1, c) = 0.0f;                      // amax 0
      at(2, c) = c % 2 ? 1e-45f : -1e-45f;  // amax / 448 underflows
    }
    at(3, H - 1) = nan;                    // the last column
    at(4, H / 2) = -inf;
    at(4, H - 1) = nan;                    // the first of two counts
    at(5, 0) = inf;
    at(6, H / 3) = 448.0f * 3.0f;          // an exact amax: codes of exactly 448 and ties below
    for (DType src : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(fmt::format("H {} from {}", H, dtype_name(src)));
      Pair in = make(rows, H, v, src, stride);
      const int64_t row = H + 4;
      DeviceBuffer cpu_out = cpu_->allocate(static_cast<size_t>(rows * row));
      DeviceBuffer gpu_out = gpu_->allocate(static_cast<size_t>(rows * row));
      // The CPU twin encodes the values the GPU holds (bf16-rounded when the GPU has bf16).
      std::vector<float> held = host(*gpu_, in.gpu);
      Pair same = make(rows, H, held, DType::F32);
      cpu_->encode_e4m3_rows(same.cpu, cpu_out.view(DType::U8, rows, row));
      gpu_->encode_e4m3_rows(in.gpu, gpu_out.view(DType::U8, rows, row));
      std::vector<uint8_t> want(static_cast<size_t>(rows * row)), got(want.size());
      std::memcpy(want.data(), cpu_out.data(), want.size());
      gpu_->wait_ticket(gpu_->copy_to_host_async(gpu_out.data(), got.data(), got.size()));
      size_t differ = 0;
      std::string first;
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i] && ++differ <= 4) {
          const auto r = static_cast<int64_t>(i) / row, c = static_cast<int64_t>(i) % row;
          first += fmt::format(" [row {} byte {}: gpu {:#04x} cpu {:#04x}, x {}]", r, c, got[i], want[i],
                               c < H ? held[static_cast<size_t>(r * H + c)] : 0.0f);
        }
      EXPECT_EQ(differ, 0u) << "of " << got.size() << ":" << first;
      EXPECT_EQ(e4m3_row_bad_column(got.data() + 3 * row, H), H - 1);
      EXPECT_EQ(e4m3_row_bad_column(got.data() + 4 * row, H), H / 2);
    }
  }
}

}  // namespace
}  // namespace e3::kernels
