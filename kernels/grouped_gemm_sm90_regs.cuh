// The computing warpgroups of the warp-specialised grouped GEMM (grouped_gemm_sm90_ws.cu) for
// quantized experts with the weights as wgmma's register operand (E3_GEMM_VARIANT=9).
//
// Why: converting a B tile into shared memory (convert_row) costs each k-step a 32 KiB store, a
// proxy fence and a barrier of both warpgroups before their wgmma may read it, and ncu found the
// converting warps waiting there. Here the product is turned around: C^T = W X^T, the weights as
// wgmma's A operand built in registers from the packed bytes, the token rows (the A tile the
// loader already brings, K-major in the 128 B swizzle) as its B operand with N = 128. A thread
// builds the fragments of one half k-step while its warpgroup's wgmma of the half before runs, and
// nothing waits for the other warpgroup.
//
// The same 128-token x 256-weight-row tile as the shared-memory path: warpgroup c holds two
// m64n128 accumulators, blocks b = 0, 1 of 64 weight rows. With the silu fused, block 0 is gate
// rows 64c .. 64c + 63 of the tile and block 1 their up rows, so each thread holds a gate value
// and its up value. Every output sums its k-tiles in the same order, 16 columns per instruction,
// as the shared-memory path does, and the fragments hold the bf16 values dequantize() gives.
#pragma once

#include "kernels/wgmma_sm90.cuh"

namespace e3::kernels::cuda::sm90 {

#ifdef E3_WGMMA

// The B-tile row (of the 256 the loader brings per stage) behind accumulator block b, half h of
// a thread: wgmma's A fragment gives thread (warp, lane) rows 16 warp + lane / 4 and that + 8.
template <bool FUSE_SILU>
__device__ __forceinline__ int weight_tile_row(int cwg, int b, int warp, int lane, int h) {
  const int block_base = FUSE_SILU ? (kTileN / 2) * b + 64 * cwg : (kTileN / 2) * cwg + 64 * b;
  return block_base + 16 * warp + lane / 4 + 8 * h;
}

// A thread's scales of one k-tile for its four rows [b][h], as the loaded bits, one register
// per load: nothing uses a loaded value before the k-step that needs it (ncu found the warps
// waiting at the loads when their two bf16 were joined into one register at once). INT4:
// raw[b][h][g] the bf16 of 32-column group g of the tile; FP8: raw[b][h][0] the block's f32 bits
// or its bf16.
struct FragScales {
  uint32_t raw[2][2][2] = {};
};
// k / 2^shift where the divisor is a power of two (the usual group and block widths), else k / d:
// the k-step then costs no 32-bit division.
__device__ __forceinline__ uint32_t divide(uint32_t k, uint32_t d, int shift) { return shift >= 0 ? k >> shift : k / d; }
template <int QB>
__device__ __forceinline__ FragScales fetch_fragment_scales(const QuantWeights& qw, const int64_t (&srow)[2][2],
                                                            int kt) {
  FragScales sc;
  const uint32_t k0 = static_cast<uint32_t>(kt) * kTileK;
  if (QB == kInt4) {
    const uint32_t group = static_cast<uint32_t>(qw.group);
    const uint32_t lo = divide(k0, group, qw.group_shift), hi = divide(k0 + 32, group, qw.group_shift);
    const uint16_t* s = static_cast<const uint16_t*>(qw.scale);
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        if (srow[b][h] >= 0) {
          sc.raw[b][h][0] = s[srow[b][h] + lo];
          sc.raw[b][h][1] = s[srow[b][h] + hi];
        }
  } else {
    const uint32_t block = divide(k0, static_cast<uint32_t>(qw.block_cols), qw.block_cols_shift);
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (srow[b][h] < 0) continue;
        const int64_t si = srow[b][h] + block;
        sc.raw[b][h][0] = qw.f32_scale ? static_cast<const uint32_t*>(qw.scale)[si]
                                       : uint32_t{static_cast<const uint16_t*>(qw.scale)[si]};
      }
  }
  return sc;
}

// The A fragments of half `half` (columns 32 half .. 32 half + 31) of one k-tile for one
// accumulator block: f[kk] for columns 32 half + 16 kk .. + 15, in the m16n8k16 A layout (thread
// (g = lane / 4, t = lane % 4): f[kk][0] row g columns 2t, 2t + 1; f[kk][1] row g + 8 the same
// columns; f[kk][2], f[kk][3] columns 2t + 8, 2t + 9), from the packed rows row0 (row g) and row1
// (row g + 8) of the stage's B area at `packed`. Rows without a stack row have scale 0; their
// outputs are columns past N, which the epilogue leaves out.
template <int QB>
__device__ __forceinline__ void weight_fragments(const unsigned char* packed, int row0, int row1, int lane, int half,
                                                 uint32_t raw0, uint32_t raw1, bool f32_scale, uint32_t (&f)[2][4]) {
  const int t = lane % 4;
  const unsigned char* p0 = packed + row0 * packed_row_bytes<QB>();
  const unsigned char* p1 = packed + row1 * packed_row_bytes<QB>();
  const int swz0 = packed_swizzle<QB>(row0), swz1 = packed_swizzle<QB>(row1);
  if (QB == kInt4) {
    // The half is 16-byte chunk `half` of each row: columns 16 kk + 2t, + 1 are byte t of its word
    // 2 kk, columns + 8, + 9 byte t of word 2 kk + 1. Permutes gather the two rows' bytes, then
    // the nibbles go under the byte 0x43 as in convert_row (0x43 | nibble is the bf16 128 +
    // nibble, minus 136 the value, times the group's scale rounded once).
    const uint4 c0 = *reinterpret_cast<const uint4*>(p0 + 16 * (half ^ swz0));
    const uint4 c1 = *reinterpret_cast<const uint4*>(p1 + 16 * (half ^ swz1));
    const uint32_t w0[4] = {c0.x, c0.y, c0.z, c0.w}, w1[4] = {c1.x, c1.y, c1.z, c1.w};
    const uint32_t pick = static_cast<uint32_t>(t) | (static_cast<uint32_t>(t + 4) << 4);
    const __nv_bfloat162 offset = __floats2bfloat162_rn(136.0f, 136.0f);
    // bf16x2 of each row's scale for this half's 32-column group.
    const uint32_t s0 = __byte_perm(raw0, 0, 0x1010), s1 = __byte_perm(raw1, 0, 0x1010);
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      // bytes: row g columns (2t, 2t+1), row g columns (2t+8, 2t+9), then the same of row g + 8
      const uint32_t x = __byte_perm(__byte_perm(w0[2 * kk], w0[2 * kk + 1], pick),
                                     __byte_perm(w1[2 * kk], w1[2 * kk + 1], pick), 0x5410);
      const uint32_t even = x & 0x0F0F0F0Fu, odd = (x >> 4) & 0x0F0F0F0Fu;
      const uint32_t row0_pairs = __byte_perm(even, odd, 0x5140), row1_pairs = __byte_perm(even, odd, 0x7362);
      const uint32_t bits[4] = {__byte_perm(row0_pairs, 0x43434343u, 0x4140), __byte_perm(row1_pairs, 0x43434343u, 0x4140),
                                __byte_perm(row0_pairs, 0x43434343u, 0x4342), __byte_perm(row1_pairs, 0x43434343u, 0x4342)};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t s = i % 2 == 0 ? s0 : s1;
        const __nv_bfloat162 v = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&bits[i]), offset);
        const __nv_bfloat162 p = __hmul2(v, *reinterpret_cast<const __nv_bfloat162*>(&s));
        f[kk][i] = *reinterpret_cast<const uint32_t*>(&p);
      }
    }
  } else {
    // Columns 16 kk + 2t, + 1 are half t % 2 of word t / 2 of the row's 16-byte chunk kk, columns
    // + 8, + 9 the same half of word 2 + t / 2: e4m3x2 -> f16x2 (exact), the fp32 product with
    // the block's scale rounded once, as convert_row does.
    const float s0 = __uint_as_float(f32_scale ? raw0 : raw0 << 16), s1 = __uint_as_float(f32_scale ? raw1 : raw1 << 16);
    const uint32_t half_pick = t % 2 ? 0x7632 : 0x5410;
    const int word = 4 * (t / 2);
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      const int chunk = 2 * half + kk;
      const unsigned char* q0 = p0 + 16 * (chunk ^ swz0) + word;
      const unsigned char* q1 = p1 + 16 * (chunk ^ swz1) + word;
      const uint32_t x0 = __byte_perm(*reinterpret_cast<const uint32_t*>(q0), *reinterpret_cast<const uint32_t*>(q0 + 8), half_pick);
      const uint32_t x1 = __byte_perm(*reinterpret_cast<const uint32_t*>(q1), *reinterpret_cast<const uint32_t*>(q1 + 8), half_pick);
      const uint32_t src[4] = {x0, x1, x0 >> 16, x1 >> 16};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t h2;
        asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(static_cast<uint16_t>(src[i])));
        const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&h2));
        const float s = i % 2 == 0 ? s0 : s1;
        f[kk][i] = pack_bf16(__fmul_rn(v.x, s), __fmul_rn(v.y, s));
      }
    }
  }
}

// Both blocks' fragments of one half k-tile: f[b][kk].
template <int QB, bool FUSE_SILU>
__device__ __forceinline__ void half_tile_fragments(const unsigned char* packed, int cwg, int warp, int lane, int half,
                                                    const FragScales& sc, bool f32_scale, uint32_t (&f)[2][2][4]) {
#pragma unroll
  for (int b = 0; b < 2; ++b)
    weight_fragments<QB>(packed, weight_tile_row<FUSE_SILU>(cwg, b, warp, lane, 0),
                         weight_tile_row<FUSE_SILU>(cwg, b, warp, lane, 1), lane, half,
                         sc.raw[b][0][QB == kInt4 ? half : 0], sc.raw[b][1][QB == kInt4 ? half : 0], f32_scale, f[b]);
}

__device__ __forceinline__ void fence_fragments(uint32_t (&f)[2][2][4]) {
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int kk = 0; kk < 2; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(f[b][kk][i])::"memory");
}

// The epilogue of a warpgroup's two transposed accumulators (rows: weight rows, columns: the
// tile's tokens; register i of n8 block j of block b: weight row 16 warp + lane / 4 + 8 (i / 2),
// token 8 j + 2 (lane % 4) + i % 2). Neighbouring lanes (lane / 4 even and odd) swap a value so
// that each stores two adjacent output columns of one token, the same bf16 as store_tile.
template <bool FUSE_SILU>
__device__ __forceinline__ void store_transposed(const GroupedArgs& g, const float (&d)[2][64], int row0, int rows,
                                                 int n0, int cwg, int warp, int lane) {
  const bool odd = (lane / 4) % 2 == 1;
  const int t = lane % 4;
  const int cols = FUSE_SILU ? g.n / 2 : g.n;
  auto store_pair = [&](int j, int col_even, float even_token, float odd_token) {
    // this lane's column holds even_token (token 8j + 2t) and odd_token (8j + 2t + 1)
    const float from_neighbour = __shfl_xor_sync(0xffffffffu, odd ? even_token : odd_token, 4);
    const int token = 8 * j + 2 * t + (odd ? 1 : 0);
    const uint32_t pair = odd ? pack_bf16(from_neighbour, odd_token) : pack_bf16(even_token, from_neighbour);
    if (token < rows && col_even < cols)
      *reinterpret_cast<uint32_t*>(g.c + int64_t{row0 + token} * cols + col_even) = pair;
  };
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if (FUSE_SILU) {
        const int col_even = n0 + 64 * cwg + 16 * warp + (lane / 4 & ~1) + 8 * hh;
        float v[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float gte = round_bf(d[0][4 * j + 2 * hh + i]), up = round_bf(d[1][4 * j + 2 * hh + i]);
          v[i] = silu_bf(gte) * up;
        }
        store_pair(j, col_even, v[0], v[1]);
      } else {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const int col_even = n0 + (kTileN / 2) * cwg + 64 * b + 16 * warp + (lane / 4 & ~1) + 8 * hh;
          store_pair(j, col_even, d[b][4 * j + 2 * hh], d[b][4 * j + 2 * hh + 1]);
        }
      }
    }
}

#endif

}  // namespace e3::kernels::cuda::sm90
