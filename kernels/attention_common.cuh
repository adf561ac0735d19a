// What the two CUDA attention kernels share (attention_cuda.cu on mma.sync, attention_sm90.cu on
// warpgroup MMA): their arguments, the key tiles a run of queries needs, and the online softmax
// step. Both hold a warp's 16 x 64 scores of a key tile in the same accumulator layout, so
// sharing this step shares their bits (tests/test_cuda_kernels.cpp checks that the two kernels
// agree exactly).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace e3::kernels::cuda {

struct AttentionArgs {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* out;
  int64_t q_stride, k_stride, v_stride, o_stride;
  const int32_t* cu_seqlens;
  int tiles_per_seq;  // query blocks per sequence (of the longest)
  int group;          // q heads per kv head
  int dqk, dv;        // real head dims (multiples of 8, at most the kernel's padded ones)
  float scale_log2;   // softmax scale * log2(e)
  int64_t window;     // 0: full causal
};

inline AttentionArgs attention_args(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p,
                                    const SequenceLayout& seqs, int queries_per_block) {
  return {q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(), q.stride, k.stride, v.stride, out.stride,
          seqs.cu_seqlens.as<int32_t>(), static_cast<int>((seqs.max_seqlen + queries_per_block - 1) / queries_per_block),
          p.num_q_heads / p.num_kv_heads, p.qk_head_dim, p.v_head_dim,
          static_cast<float>(p.scale * 1.4426950408889634), p.sliding_window};
}

// The first key of the KEYS-key tiles that queries from q0 on need: 0, or the window's lower
// bound rounded down to a whole tile (in 64 bits: a window may exceed an int).
template <int KEYS>
__device__ __forceinline__ int first_key(int q0, int64_t window) {
  return window > 0 ? static_cast<int>(max(int64_t{0}, q0 - window + 1) / KEYS * KEYS) : 0;
}

// 2^x on the special function unit. exp2f would also keep results below 2^-126 (as denormals),
// at three more instructions per score; such a weight is lost against the row's largest, which
// is 1, in every sum it enters anyway.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// One thread's running maximum (log2 domain) and running sum for each of its two query rows.
struct SoftmaxRows {
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.0f, 0.0f};
};

// Where a thread's scores sit: its warp's first query row, its own two rows (lane / 4 and
// lane / 4 + 8 of the warp's 16) and its column pair (lane % 4) within each 8-key group.
struct ScoreRows {
  int warp_row0, row_a, row_b, c4;
};

// A 64-key tile from key kv0 on: the raw products Q.K^T in s (register 4 j + e: key
// kv0 + 8 j + 2 c4 + e % 2, row e < 2 ? row_a : row_b) become the weights
// P = 2^(s * scale_log2 - m) in place, with m the rows' new running maxima. Returns in corr the
// factors by which the rows' O must be rescaled. Keys past the row (causal), past the sequence's
// end or outside the window get weight 0; only tiles that cut through the warp's 16 rows are
// masked, a mask being a no-op everywhere else.
__device__ __forceinline__ void online_softmax_tile(float (&s)[32], SoftmaxRows& st, float (&corr)[2], int kv0,
                                                    const ScoreRows& r, int len, int64_t window, float scale_log2) {
  const bool all_visible =
      kv0 + 63 <= r.warp_row0 && kv0 + 64 <= len && (window == 0 || r.warp_row0 + 15 - kv0 < window);
  if (!all_visible) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int key = kv0 + (i / 4) * 8 + 2 * r.c4 + (i & 1);
      const int row = (i & 2) ? r.row_b : r.row_a;
      if (!(key <= row && key < len && (window == 0 || row - key < window))) s[i] = -INFINITY;
    }
  }
  // The row maxima of the raw products, scaled once: rounding is monotonic, so this is the
  // maximum of the scaled products, and the scaling itself folds into the exponent's FMA.
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < 32; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    const float m_new = fmaxf(st.m_run[h], __fmul_rn(mx[h], scale_log2));
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet
    corr[h] = exp2_ftz(st.m_run[h] - m_use);
    st.m_run[h] = m_new;
    mx[h] = m_use;
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    s[i] = exp2_ftz(fmaf(s[i], scale_log2, -mx[(i >> 1) & 1]));
    sum[(i >> 1) & 1] += s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 1);
    sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
    st.l_run[h] = st.l_run[h] * corr[h] + sum[h];
  }
}

}  // namespace e3::kernels::cuda
