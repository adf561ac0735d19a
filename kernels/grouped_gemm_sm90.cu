// The grouped expert GEMM on Hopper (sm_90a): warpgroup MMA (wgmma) from 128-byte-swizzled
// shared memory. Rows of A are gathered per expert (the token permutation), so tiles are
// loaded with cp.async rather than the tensor copy engine, which cannot gather rows. Built
// only into the sm_90a image; moe_cuda.cu falls back to the portable mma.sync kernel when
// hopper_grouped_gemm_built() says this image is absent or the GPU is not sm_90.
#include "kernels/wgmma_sm90.cuh"

namespace e3::kernels::cuda {
namespace {

using namespace sm90;

// 128 x 256 output tile per block: two warpgroups of m64 x n256, k 64 per stage (one 128 B
// swizzle row), 4 stages of 48 KiB. With the silu fused, the 256 B-tile rows are 128 gate
// rows and the 128 matching up rows, so each thread holds a gate value and its up value.
constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kThreads = 256;
constexpr int kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2, kStageBytes = kABytes + kBBytes;
constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + 1024;  // + alignment slack for the swizzle

// With quantized B (QB != kBf16) a stage holds the A tile and B's packed bytes (at most 64 per
// row: FP8), and two bf16 B tiles, converted from the packed bytes, alternate outside the stages.
constexpr int kPackedBytes = kBN * kBK, kQStageBytes = kABytes + kPackedBytes;
constexpr size_t kQSmemBytes = size_t{kStages} * kQStageBytes + 2 * size_t{kBBytes} + 1024;
template <int QB>
constexpr int stage_bytes() { return QB == kBf16 ? kStageBytes : kQStageBytes; }

template <bool FUSE_SILU, int QB>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_wgmma_kernel(GroupedArgs g, QuantWeights qw) {
#ifdef E3_WGMMA
  constexpr int kStage = stage_bytes<QB>();
  extern __shared__ unsigned char raw_smem[];
  const uint32_t raw = smem_addr(raw_smem);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = raw_smem + (base - raw);

  const ExpertTile et = expert_tile(g, blockIdx.x, kBM);
  if (et.expert < 0) return;
  const int e = et.expert, row0 = et.row0, rows = et.rows;
  const int half = g.n / 2;
  const int n0 = blockIdx.y * (FUSE_SILU ? kBN / 2 : kBN);  // first output column
  const bf16* W = QB == kBf16 ? g.w + int64_t{e} * g.n * g.k : nullptr;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int k_tiles = (g.k + kBK - 1) / kBK;

  // Each thread loads the same rows in every stage; resolve them (and the gather) once.
  constexpr int kAPer = kBM * 8 / kThreads, kBPer = kBN * 8 / kThreads;
  const int chunk = tid % 8;
  const bf16* a_src[kAPer];
  const bf16* b_src[kBPer];
  const int64_t q_row = QB != kBf16 ? quant_row<FUSE_SILU>(g, qw, e, n0, tid) : -1;  // thread t converts B-tile row t
  const int64_t s_row = scale_row<QB>(qw, q_row);
#pragma unroll
  for (int j = 0; j < kAPer; ++j) {
    const int r = tid / 8 + j * (kThreads / 8);
    const int64_t src_row = r < rows ? (g.a_rows ? g.a_rows[row0 + r] : row0 + r) : -1;
    a_src[j] = src_row >= 0 ? g.a + src_row * g.lda + chunk * 8 : nullptr;
  }
#pragma unroll
  for (int j = 0; j < kBPer; ++j) {
    b_src[j] = nullptr;
    if (QB != kBf16) continue;
    const int r = tid / 8 + j * (kThreads / 8);
    int wr;
    if (FUSE_SILU) {
      const int col = n0 + r % (kBN / 2);
      wr = col < half ? (r < kBN / 2 ? col : half + col) : -1;
    } else {
      wr = n0 + r < g.n ? n0 + r : -1;
    }
    b_src[j] = wr >= 0 ? W + int64_t{wr} * g.k + chunk * 8 : nullptr;
  }

  // The packed bytes of B-tile row r for k-tile kt: 32 (INT4) or 64 (FP8), in 16-byte chunks.
  constexpr int kPackedRow = QB == kInt4 ? kBK / 2 : kBK, kPackedChunks = kPackedRow / 16;
  auto load_packed = [&](unsigned char* sp, int kt) {
    for (int i = tid; i < kBN * kPackedChunks; i += kThreads) {
      const int r = i / kPackedChunks, c = i % kPackedChunks;
      const int64_t row = quant_row<FUSE_SILU>(g, qw, e, n0, r);
      const bool ok = row >= 0;
      const unsigned char* src = static_cast<const unsigned char*>(qw.q) + (ok ? row : 0) * qw.row_bytes +
                                 int64_t{kt} * kPackedRow + c * 16;
      cp_async_16(sp + r * kPackedRow + c * 16, src, ok);
    }
  };

  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kBK;
    const bool k_ok = k0 + chunk * 8 < g.k;
    unsigned char* sa = smem + stage * kStage;
    unsigned char* sb = sa + kABytes;
    if (QB != kBf16) load_packed(sb, kt);
#pragma unroll
    for (int j = 0; j < kAPer; ++j) {
      const int r = tid / 8 + j * (kThreads / 8);
      const bool ok = k_ok && a_src[j];
      cp_async_16(sa + sw128_offset(r, chunk), ok ? a_src[j] + k0 : g.a, ok);
    }
#pragma unroll
    for (int j = 0; j < kBPer; ++j) {
      if (QB != kBf16) break;
      const int r = tid / 8 + j * (kThreads / 8);
      const bool ok = k_ok && b_src[j];
      cp_async_16(sb + sw128_offset(r, chunk), ok ? b_src[j] + k0 : g.w, ok);
    }
  };

  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;

  // Loads run kStages - 2 tiles ahead: the stage refilled at step kt was last read by the
  // wgmma of step kt - 2, which every warpgroup has waited for before the barrier.
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  // The scales are read one step ahead, so that their latency hides behind a step.
  RowScales scales_next = fetch_scales<QB>(qw, s_row, 0);
  for (int kt = 0; kt < k_tiles; ++kt) {
    const RowScales scales = scales_next;
    if (QB != kBf16 && kt + 1 < k_tiles) scales_next = fetch_scales<QB>(qw, s_row, kt + 1);
    cp_async_wait<kStages - 3>();
    fence_async_shared();  // cp.async writes -> tensor-core reads
    __syncthreads();
    const int next = kt + kStages - 2;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();

    const uint32_t sa = base + (kt % kStages) * kStage + wg * (kBM / 2) * 128;
    uint32_t sb = base + (kt % kStages) * kStage + kABytes;
    if (QB != kBf16) {
      // The B tile converted two steps ago was last read by wgmma kt - 2, which every
      // warpgroup has waited for before the barrier above.
      const uint32_t bt = base + kStages * kStage + (kt % 2) * kBBytes;
      convert_row<QB>(smem + (kt % kStages) * kStage + kABytes + tid * kPackedRow, smem + (bt - base), tid, q_row >= 0,
                      scales);
      fence_async_shared();
      __syncthreads();
      sb = bt;
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) fence_operand(d[i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) wgmma_m64n256k16(d, sw128_desc(sa + kk * 32), sw128_desc(sb + kk * 32));
    wgmma_commit();
    wgmma_wait<1>();
#pragma unroll
    for (int i = 0; i < 128; ++i) fence_operand(d[i]);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < 128; ++i) fence_operand(d[i]);
  cp_async_wait<0>();

  store_tile<FUSE_SILU>(g, d, row0, rows, n0, wg * 64, warp, lane);
#endif
}

__global__ void wgmma_probe_kernel(int* built) {
#ifdef E3_WGMMA
  *built = 1;
#else
  *built = 0;
#endif
}

template <bool FUSE, int QB>
void launch(const GroupedArgs& g, const QuantWeights& qw, int64_t max_rows, cudaStream_t s) {
  const size_t smem = QB == kBf16 ? kSmemBytes : kQSmemBytes;
  E3_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_wgmma_kernel<FUSE, QB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t max_tiles = (max_rows + kBM - 1) / kBM + g.experts;  // at most one partial tile per expert
  const int cols = FUSE ? g.n / 2 : g.n, per_block = FUSE ? kBN / 2 : kBN;
  const dim3 grid(static_cast<unsigned>(max_tiles), static_cast<unsigned>((cols + per_block - 1) / per_block));
  grouped_gemm_wgmma_kernel<FUSE, QB><<<grid, kThreads, smem, s>>>(g, qw);
  E3_CUDA_LAUNCH_CHECK("grouped_gemm_wgmma");
}

template <int QB>
void launch_both(const GroupedArgs& g, const QuantWeights& qw, bool fuse_silu, int64_t max_rows, cudaStream_t s) {
  if (fuse_silu) launch<true, QB>(g, qw, max_rows, s);
  else launch<false, QB>(g, qw, max_rows, s);
}

}  // namespace

int grouped_gemm_hopper_tile_rows() { return kBM; }

WsSchedule ws_schedule(HopperGemm kernel, const uint8_t* l2_side_of_sm) {
  WsSchedule w;
  const bool counted = kernel == HopperGemm::WarpSpecializedCounted || kernel == HopperGemm::WarpSpecializedCountedRegs;
  w.slab_major = kernel == HopperGemm::WarpSpecializedSlabMajor || counted;
  w.counted = counted;
  w.weights_in_registers = kernel == HopperGemm::WarpSpecializedCountedRegs;
  w.l2_side_of_sm = counted ? l2_side_of_sm : nullptr;
  return w;
}

void grouped_gemm_hopper(const GroupedArgs& g, bool fuse_silu, int64_t max_rows, cudaStream_t s, HopperGemm kernel,
                         const uint8_t* l2_side_of_sm) {
  if (kernel != HopperGemm::CpAsync && grouped_gemm_ws_reads(g))
    return grouped_gemm_ws(g, fuse_silu, max_rows, s, kernel == HopperGemm::WarpSpecializedShortK,
                           ws_schedule(kernel, l2_side_of_sm));
  launch_both<kBf16>(g, QuantWeights{}, fuse_silu, max_rows, s);
}

bool grouped_gemm_hopper_reads(const QuantStack& w) {
  // 16-byte cp.async of the packed rows; 4-byte scale reads.
  if (reinterpret_cast<uintptr_t>(w.q) % 16 != 0 || reinterpret_cast<uintptr_t>(w.scale) % 4 != 0) return false;
  if (w.format == QuantStack::Format::Int4Group) return w.cols % kBK == 0 && w.group % 32 == 0;
  if (w.format == QuantStack::Format::Fp8Block)
    return w.cols % kBK == 0 && w.block_cols % kBK == 0 && w.row_offset == 0 && w.col_offset == 0;
  return false;
}

void grouped_gemm_hopper_quantized(const GroupedArgs& g, const QuantStack& w, bool fuse_silu, int64_t max_rows,
                                   cudaStream_t s, HopperGemm kernel, const uint8_t* l2_side_of_sm) {
  E3_REQUIRE(grouped_gemm_hopper_reads(w) && w.cols == g.k, ErrorKind::Internal,
             "grouped_gemm_hopper_quantized: unsupported stack [{}, {}]", w.rows, w.cols);
  QuantWeights qw;
  qw.q = w.q;
  qw.scale = w.scale;
  qw.rows = w.rows;
  qw.row_bytes = w.format == QuantStack::Format::Int4Group ? w.cols / 2 : w.cols;
  qw.scale_cols = w.scale_cols();
  qw.matrix_scales = w.scale_rows() * w.scale_cols();
  qw.group = w.group;
  qw.block_rows = w.block_rows;
  qw.block_cols = w.block_cols;
  const auto log2_or_minus_one = [](int64_t v) {
    for (int s = 0; s < 31; ++s)
      if (v == int64_t{1} << s) return s;
    return -1;
  };
  qw.group_shift = log2_or_minus_one(w.group);
  qw.block_cols_shift = log2_or_minus_one(w.block_cols);
  qw.f32_scale = w.scale_type == ScaleType::F32;
  const bool int4 = w.format == QuantStack::Format::Int4Group;
  if (kernel != HopperGemm::CpAsync && grouped_gemm_ws_reads(g))
    return grouped_gemm_ws_quantized(g, qw, int4, fuse_silu, max_rows, ws_schedule(kernel, l2_side_of_sm), s);
  if (int4) launch_both<kInt4>(g, qw, fuse_silu, max_rows, s);
  else launch_both<kFp8>(g, qw, fuse_silu, max_rows, s);
}

bool hopper_grouped_gemm_built(int device) {
  cudaDeviceProp prop{};
  E3_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major != 9 || prop.minor != 0) return false;
  int* flag = nullptr;
  E3_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  int built = 0;
  wgmma_probe_kernel<<<1, 1>>>(flag);
  const cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) E3_CUDA_CHECK(cudaMemcpy(&built, flag, sizeof built, cudaMemcpyDeviceToHost));
  cudaFree(flag);
  // No image for this GPU at all (cudaErrorNoKernelImageForDevice) means no sm_90a image either.
  return launched == cudaSuccess && built == 1;
}

}  // namespace e3::kernels::cuda
