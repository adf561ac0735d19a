// Variable-length causal attention on Hopper (sm_90a): the same contract as the mma.sync kernel
// of attention_cuda.cu (packed sequences, GQA, sliding windows, online softmax, no [T, T]
// matrix), with both products on warpgroup MMA. A block owns 128 queries of one head of one
// sequence, 64 per computing warpgroup, so each K and V element read from shared memory feeds
// 64 query rows where a warp of the mma.sync kernel fed 16: that kernel is bound by its
// shared-memory reads (ldmatrix), this one by the tensor cores and the softmax.
//
// - S = Q K^T: Q and K both from shared memory, K-major in the 128 B swizzle (64-column
//   blocks, as the grouped GEMM's tiles). Q stays there for the block's life.
// - O += P V: P's accumulators become A fragments where they are (the m64nNk16 accumulator and
//   A layouts agree per warp, as mma.sync's do); V is read N-major (dv contiguous, the
//   instruction's transposed B), so it needs no transpose on its way into shared memory.
// - One warpgroup only loads: it brings Q, then each 64-key K/V tile, with cp.async
//   (rows past the sequence's end and columns past the head's dims are zero-filled, so nothing
//   of a neighbouring sequence or head enters the products) into four stages handed over
//   through mbarriers, `full` (the copies have landed) and `empty` (every computing warp is
//   done with the stage). The two computing warpgroups never wait for each other, so one's
//   softmax runs while the other's products keep the tensor cores busy.
// - A computing warpgroup visits the key tiles its 64 queries need (causal, window) and masks
//   only those that cut through a warp's 16 rows.
// Compiled only into the sm_90a image (E3_WGMMA); attention_cuda.cu picks it where it runs.
#include <cmath>

#include "kernels/attention_common.cuh"
#include "kernels/ops_cuda.h"
#include "kernels/wgmma_sm90.cuh"

namespace e3::kernels::cuda {
namespace {

using namespace sm90;

constexpr int kBM = 128;     // queries per block
constexpr int kWgRows = 64;  // queries per computing warpgroup
constexpr int kBN = 64;      // keys per tile
constexpr int kStages = 4;
// Two computing warpgroups (warps 0-7) and one loading warpgroup (8-11), one warp of each per
// scheduler. ptxas gives such a block 168 registers per thread: O's and S's accumulators and P's
// fragments fit, Q's would not, so Q is read from shared memory.
constexpr int kComputeThreads = 256, kLoaderThreads = 128, kThreads = kComputeThreads + kLoaderThreads;
static_assert(kLoaderThreads % 64 == 0, "whole 8-row swizzle groups per pass");

using Args = AttentionArgs;

// Shared memory: Q [128 rows] and each stage's K and V [64 keys] as 64-column blocks of 128 B
// rows in the 128 B swizzle (every block 1024 B aligned).
template <int DQK, int DV>
struct Smem {
  static constexpr int kQBytes = kBM * DQK * 2, kKBytes = kBN * DQK * 2, kVBytes = kBN * DV * 2;
  static constexpr size_t kBytes = size_t{kQBytes} + size_t{kStages} * (kKBytes + kVBytes) + 1024;
};

#ifdef E3_WGMMA
template <int DV>
__device__ __forceinline__ void wgmma_pv(float (&o)[DV / 2], const uint32_t (&p)[4], uint64_t desc) {
  if constexpr (DV == 128) wgmma_m64n128k16_rs_nmajor(o, p, desc);
  else wgmma_m64n64k16_rs_nmajor(o, p, desc);
}

// ROWS x (BLOCKS * 64) of a head into BLOCKS swizzled column blocks by the loading warpgroup;
// rows past `valid_rows` and columns past `dim` are zeros (`safe` is any valid address: a
// zero-filled chunk still names one). Each loader thread keeps one 16 B chunk column and one row
// residue for the whole block, so the unrolled copies cost an add each: a single warp looping
// over chunk indices (a division and a 64-bit product per copy) was latency-bound and left the
// tensor cores waiting several microseconds per tile.
template <int ROWS, int BLOCKS>
__device__ __forceinline__ void load_swizzled(unsigned char* smem, const bf16* base, int64_t stride, int valid_rows,
                                              int dim, const bf16* safe, int lt) {
  constexpr int kRowsPerPass = kLoaderThreads / 8;
  const int chunk = lt % 8, row0 = lt / 8;
  const uint32_t dst0 = row0 * 128 + ((chunk ^ (row0 & 7)) << 4);  // kRowsPerPass % 8 == 0: one residue
  const bf16* src0 = base + row0 * stride + chunk * 8;
#pragma unroll
  for (int b = 0; b < BLOCKS; ++b) {
    const bool col_ok = b * 64 + chunk * 8 < dim;
#pragma unroll
    for (int pass = 0; pass < ROWS / kRowsPerPass; ++pass) {
      const int r = row0 + pass * kRowsPerPass;
      const bool ok = col_ok && r < valid_rows;
      cp_async_16(smem + b * (ROWS * 128) + pass * (kRowsPerPass * 128) + dst0,
                  ok ? src0 + pass * kRowsPerPass * stride + b * 64 : safe, ok);
    }
  }
}

// One computing thread's share of O (accumulator layout of m64nDV: n8 block i, register e ->
// row 16 warp + g + 8 (e / 2), column 8 i + 2 c4 + e % 2) and its rows' softmax state.
template <int DV>
struct RowState {
  float o[DV / 2];
  SoftmaxRows rows;
};

// One key tile for one computing warpgroup: S = Q K^T, the online softmax, O += P V; returns
// with the products done (the stage may be handed back).
template <int DQK, int DV>
__device__ __forceinline__ void attend_tile(RowState<DV>& st, uint32_t q_rows, uint32_t k_tile, uint32_t v_tile,
                                            int kv0, const ScoreRows& rows, int len, const Args& a) {
  // S for the warpgroup's 64 queries and the tile's 64 keys; register 4 j + e: row
  // 16 warp + g + 8 (e / 2), key 8 j + 2 c4 + e % 2 (the mma.sync kernel's layout per warp).
  float s[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = 0.0f;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < DQK / 16; ++kk)
    wgmma_m64n64k16(s, sw128_desc(q_rows + (kk / 4) * (kBM * 128) + (kk % 4) * 32),
                    sw128_desc(k_tile + (kk / 4) * (kBN * 128) + (kk % 4) * 32));
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < 32; ++i) fence_operand(s[i]);

  float corr[2];
  online_softmax_tile(s, st.rows, corr, kv0, rows, len, a.window, a.scale_log2);
#pragma unroll
  for (int i = 0; i < DV / 2; ++i) st.o[i] *= corr[(i >> 1) & 1];

  // O += P V, P's accumulators as A fragments: keys 16 kk .. 16 kk + 15 are n8 blocks 2 kk, 2 kk + 1.
  uint32_t p[kBN / 16][4];
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
    p[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
    p[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
    p[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
    p[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
  }
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk)
    wgmma_pv<DV>(st.o, p[kk], sw128_nmajor_desc(v_tile + kk * 16 * 128, kBN * 128));
  wgmma_commit();
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < DV / 2; ++i) fence_operand(st.o[i]);
}
#endif

template <int DQK, int DV>
__global__ void __launch_bounds__(kThreads, 1) attention_wgmma_kernel(Args a) {
#ifdef E3_WGMMA
  static_assert(DQK % 64 == 0 && (DV == 64 || DV == 128), "64-column blocks; P.V as m64n64 or m64n128");
  using S = Smem<DQK, DV>;
  constexpr int kQBlocks = DQK / 64, kVBlocks = DV / 64;
  extern __shared__ unsigned char raw_smem[];
  __shared__ alignas(8) uint64_t full_bar[kStages], empty_bar[kStages], q_bar;
  const uint32_t raw = smem_addr(raw_smem);
  unsigned char* smem = raw_smem + (((raw + 1023u) & ~1023u) - raw);
  unsigned char* sQ = smem;
  unsigned char* sK = sQ + S::kQBytes;
  unsigned char* sV = sK + kStages * S::kKBytes;

  const int head = blockIdx.y;
  const int seq = blockIdx.x / a.tiles_per_seq;
  // The longest query tiles (most keys) first: they finish last otherwise.
  const int tile = a.tiles_per_seq - 1 - static_cast<int>(blockIdx.x % a.tiles_per_seq);
  const int start = a.cu_seqlens[seq];
  const int len = a.cu_seqlens[seq + 1] - start;
  const int q0 = tile * kBM;
  if (q0 >= len) return;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_addr(&full_bar[s]), kLoaderThreads);     // each loader thread's cp.async arrival
      mbar_init(smem_addr(&empty_bar[s]), kComputeThreads / 32);  // each computing warp's
    }
    mbar_init(smem_addr(&q_bar), kLoaderThreads);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // The block's key tiles: causal up to its last query, from the window's lower bound.
  const int k_begin = first_key<kBN>(q0, a.window);
  const int num_tiles = (min(q0 + kBM, len) - k_begin + kBN - 1) / kBN;

  if (tid >= kComputeThreads) {
    // --- loader ---
    const int lt = tid - kComputeThreads;
    const int kv_head = head / a.group;
    const bf16* qbase = a.q + (start + q0) * a.q_stride + int64_t{head} * a.dqk;
    const bf16* kbase = a.k + int64_t{start} * a.k_stride + int64_t{kv_head} * a.dqk;
    const bf16* vbase = a.v + int64_t{start} * a.v_stride + int64_t{kv_head} * a.dv;
    load_swizzled<kBM, kQBlocks>(sQ, qbase, a.q_stride, len - q0, a.dqk, a.q, lt);
    cp_async_arrive_noinc(smem_addr(&q_bar));
    for (int t = 0; t < num_tiles; ++t) {
      const int s = t % kStages;
      mbar_wait(smem_addr(&empty_bar[s]), ((t / kStages) & 1) ^ 1);
      const int kv0 = k_begin + t * kBN;
      load_swizzled<kBN, kQBlocks>(sK + s * S::kKBytes, kbase + int64_t{kv0} * a.k_stride, a.k_stride, len - kv0,
                                   a.dqk, a.k, lt);
      load_swizzled<kBN, kVBlocks>(sV + s * S::kVBytes, vbase + int64_t{kv0} * a.v_stride, a.v_stride, len - kv0,
                                   a.dv, a.v, lt);
      cp_async_arrive_noinc(smem_addr(&full_bar[s]));
    }
    cp_async_commit();
    cp_async_wait<0>();
  } else {
    // --- compute ---
    const int cwg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
    const int g = lane / 4, c4 = lane % 4;
    // This warpgroup's key tiles: those of its 64 queries (none for a half past the sequence's end).
    const int wg_row0 = q0 + cwg * kWgRows;
    const int wg_k_begin = first_key<kBN>(wg_row0, a.window);
    const int wg_k_last = wg_row0 < len ? min(wg_row0 + kWgRows, len) - 1 : -1;
    const int warp_row0 = wg_row0 + warp * 16;
    const ScoreRows rows{warp_row0, warp_row0 + g, warp_row0 + g + 8, c4};

    // This warpgroup's 64 rows of Q (8-row groups of 128 B, so its first row starts a group).
    const uint32_t q_rows = smem_addr(sQ) + cwg * kWgRows * 128;
    mbar_wait(smem_addr(&q_bar), 0);
    fence_async_shared();
    RowState<DV> st;
#pragma unroll
    for (int i = 0; i < DV / 2; ++i) st.o[i] = 0.0f;

    for (int t = 0; t < num_tiles; ++t) {
      // Every computing warp passes through every stage in order, its tiles or not, so that
      // each release counts toward the phase of the tile it follows.
      const int s = t % kStages;
      mbar_wait(smem_addr(&full_bar[s]), (t / kStages) & 1);
      fence_async_shared();  // cp.async's writes -> the tensor cores' reads
      const int kv0 = k_begin + t * kBN;
      if (kv0 >= wg_k_begin && kv0 <= wg_k_last)
        attend_tile<DQK, DV>(st, q_rows, smem_addr(sK + s * S::kKBytes), smem_addr(sV + s * S::kVBytes), kv0, rows,
                             len, a);
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_addr(&empty_bar[s]));
    }

    const float inv_a = st.rows.l_run[0] > 0.0f ? 1.0f / st.rows.l_run[0] : 0.0f;
    const float inv_b = st.rows.l_run[1] > 0.0f ? 1.0f / st.rows.l_run[1] : 0.0f;
    const int row_a = rows.row_a, row_b = rows.row_b;
    bf16* obase = a.out + int64_t{start} * a.o_stride + int64_t{head} * a.dv;
#pragma unroll
    for (int i = 0; i < DV / 8; ++i) {
      const int col = i * 8 + 2 * c4;
      if (col >= a.dv) continue;
      if (row_a < len)
        *reinterpret_cast<uint32_t*>(obase + int64_t{row_a} * a.o_stride + col) =
            pack_bf16(st.o[4 * i] * inv_a, st.o[4 * i + 1] * inv_a);
      if (row_b < len)
        *reinterpret_cast<uint32_t*>(obase + int64_t{row_b} * a.o_stride + col) =
            pack_bf16(st.o[4 * i + 2] * inv_b, st.o[4 * i + 3] * inv_b);
    }
  }
#endif
}

template <int DQK, int DV>
void launch(const Args& a, int num_seqs, int heads, cudaStream_t s) {
  constexpr size_t bytes = Smem<DQK, DV>::kBytes;
  // Above 48 KiB of dynamic shared memory a kernel must opt in; a host-side call, no sync.
  E3_CUDA_CHECK(cudaFuncSetAttribute(attention_wgmma_kernel<DQK, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>(num_seqs * a.tiles_per_seq), static_cast<unsigned>(heads));
  attention_wgmma_kernel<DQK, DV><<<grid, kThreads, bytes, s>>>(a);
  E3_CUDA_LAUNCH_CHECK("attention_wgmma");
}

}  // namespace

bool attention_wgmma_fits(const AttentionParams& p) { return p.qk_head_dim <= 192 && p.v_head_dim <= 128; }

void attention_wgmma(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p, const SequenceLayout& seqs,
                     cudaStream_t s) {
  const Args a = attention_args(q, k, v, out, p, seqs, kBM);
  const int dqk = p.qk_head_dim, dv = p.v_head_dim, heads = p.num_q_heads, n = seqs.num_seqs;
  // The smallest padded pair that holds the real dims (64-column blocks).
  if (dqk <= 64 && dv <= 64) return launch<64, 64>(a, n, heads, s);
  if (dqk <= 128 && dv <= 128) return launch<128, 128>(a, n, heads, s);
  if (dqk <= 192 && dv <= 128) return launch<192, 128>(a, n, heads, s);
  E3_THROW(ErrorKind::Internal, "attention_wgmma: head dims {} / {} past 192 / 128", dqk, dv);
}

}  // namespace e3::kernels::cuda
