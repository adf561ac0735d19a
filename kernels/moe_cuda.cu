// MoE on the GPU without host synchronisation: the router picks top-k experts per token; a
// deterministic counting sort groups the (token, slot) pairs of this rank's experts by
// expert; grouped GEMMs (one launch for all experts, tiles found on the device) compute
// gate|up and down; a combine pass sums each token's weighted expert outputs in fp32.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/grouped_gemm_cuda.cuh"
#include "kernels/moe_scratch.h"
#include "kernels/ops_cuda.h"

namespace e3::kernels::cuda {
namespace {

// ---------------------------------------------------------------------------------------- router

struct RouterArgs {
  int experts, top_k, n_group, topk_group;
  bool sigmoid, norm;
  int select;  // 0 greedy, 1 group-limited greedy, 2 noaux_tc
  float scaling;
};

constexpr int kRouteWarps = 4;

// One warp per token. Scores, then (optionally) groups, then k rounds of a warp argmax with
// ties to the lower expert id, as the CPU twin does.
__global__ void route_kernel(const float* logits, int64_t ls, const float* bias, RouterArgs p, int32_t* ids,
                             int64_t is, float* weights, int64_t wstride, int64_t tokens) {
  extern __shared__ float route_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x * int64_t{kRouteWarps} + warp;
  if (t >= tokens) return;
  const int E = p.experts;
  float* score = route_smem + warp * 2 * E;
  float* choice = score + E;
  __shared__ unsigned char taken[kRouteWarps][512];
  __shared__ unsigned char keep[kRouteWarps][32];
  __shared__ float gscore[kRouteWarps][32];
  const float* lg = logits + t * ls;

  float mx = -INFINITY;
  for (int e = lane; e < E; e += 32) mx = fmaxf(mx, lg[e]);
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.0f;
  for (int e = lane; e < E; e += 32) {
    const float v = p.sigmoid ? 1.0f / (1.0f + expf(-lg[e])) : expf(lg[e] - mx);
    score[e] = v;
    sum += v;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  for (int e = lane; e < E; e += 32) {
    if (!p.sigmoid) score[e] /= sum;
    choice[e] = score[e] + (p.select == 2 ? bias[e] : 0.0f);
    taken[warp][e] = 0;
  }
  __syncwarp();

  if (p.select != 0 && p.topk_group < p.n_group) {
    const int per = E / p.n_group;
    if (lane < p.n_group) {
      const float* c = choice + lane * per;
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int i = 0; i < per; ++i) {
        if (c[i] > b1) {
          b2 = b1;
          b1 = c[i];
        } else if (c[i] > b2) {
          b2 = c[i];
        }
      }
      gscore[warp][lane] = p.select == 2 ? b1 + (per > 1 ? b2 : 0.0f) : b1;
      keep[warp][lane] = 0;
    }
    __syncwarp();
    if (lane == 0)
      for (int r = 0; r < p.topk_group; ++r) {
        int best = -1;
        for (int gi = 0; gi < p.n_group; ++gi)
          if (!keep[warp][gi] && (best < 0 || gscore[warp][gi] > gscore[warp][best])) best = gi;
        keep[warp][best] = 1;
      }
    __syncwarp();
    const float dropped = p.select == 2 ? -INFINITY : 0.0f;
    for (int e = lane; e < E; e += 32)
      if (!keep[warp][e / per]) choice[e] = dropped;
    __syncwarp();
  }

  float picked_sum = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int e = lane; e < E; e += 32)
      if (!taken[warp][e] && (choice[e] > bv || (choice[e] == bv && e < bi) || bi == 0x7fffffff)) {
        bv = choice[e];
        bi = e;
      }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      taken[warp][bi] = 1;
      ids[t * is + j] = bi;
      weights[t * wstride + j] = score[bi];
    }
    picked_sum += score[bi];
    __syncwarp();
  }
  if (lane == 0)
    for (int j = 0; j < p.top_k; ++j) {
      float w = weights[t * wstride + j];
      if (p.norm) w /= picked_sum + 1e-20f;
      weights[t * wstride + j] = w * p.scaling;
    }
}

// ------------------------------------------------------------------------------------- dispatch

struct Layout {  // the scratch buffer, carved up as moe_scratch_layout says
  bf16 *gate_up, *act, *y;
  int32_t *perm_token, *pair_row, *chunk_counts, *row_offsets, *tile_offsets;
  unsigned long long* tile_counters;
  float* perm_weight;
  bf16 *deq_gate_up, *deq_down;  // the experts dequantized for this call, when kept quantized
  size_t bytes;
};

Layout carve(void* base, int64_t tokens, int top_k, int experts, int64_t H, int64_t I, bool quantized,
             bool fuse_silu) {
  const MoeScratchLayout m = moe_scratch_layout(tokens, top_k, experts, H, I, quantized, !fuse_silu);
  char* b = static_cast<char*>(base);
  Layout l{};
  // With the silu fused nothing holds gate|up; null rather than a pointer that aliases act.
  l.gate_up = fuse_silu ? nullptr : reinterpret_cast<bf16*>(b + m.gate_up);
  l.act = reinterpret_cast<bf16*>(b + m.act);
  l.y = reinterpret_cast<bf16*>(b + m.y);
  l.perm_token = reinterpret_cast<int32_t*>(b + m.perm_token);
  l.perm_weight = reinterpret_cast<float*>(b + m.perm_weight);
  l.pair_row = reinterpret_cast<int32_t*>(b + m.pair_row);
  l.chunk_counts = reinterpret_cast<int32_t*>(b + m.chunk_counts);
  l.row_offsets = reinterpret_cast<int32_t*>(b + m.row_offsets);
  l.tile_offsets = reinterpret_cast<int32_t*>(b + m.tile_offsets);
  l.tile_counters = reinterpret_cast<unsigned long long*>(b + m.tile_counters);
  l.deq_gate_up = reinterpret_cast<bf16*>(b + m.deq_gate_up);
  l.deq_down = reinterpret_cast<bf16*>(b + m.deq_down);
  l.bytes = m.bytes;
  return l;
}

// The dispatch lays out each local expert's rows in (token, slot) order, so that results never
// depend on timing: each block takes a chunk of kMoeDispatchChunk pairs (one per thread).
constexpr int kDispatchChunk = kMoeDispatchChunk, kDispatchWarps = kDispatchChunk / 32;

// Block c counts the pairs of chunk c routed to each local expert.
__global__ void chunk_count_kernel(const int32_t* ids, int64_t pairs, int first, int experts, int32_t* chunk_counts) {
  extern __shared__ int chunk_count[];  // [experts]
  for (int e = threadIdx.x; e < experts; e += blockDim.x) chunk_count[e] = 0;
  __syncthreads();
  const int64_t i = blockIdx.x * int64_t{kDispatchChunk} + threadIdx.x;
  if (i < pairs) {
    const int e = ids[i] - first;
    if (e >= 0 && e < experts) atomicAdd(&chunk_count[e], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) chunk_counts[blockIdx.x * int64_t{experts} + e] = chunk_count[e];
}

// One block, a thread per local expert: each expert's first row and first tile (of bm rows),
// and in place of the chunk counts each chunk's first row for the expert. The two tile counters
// start at zero (the warp-specialised GEMM's schedule from a counter).
__global__ void chunk_scan_kernel(int32_t* chunk_counts, int chunks, int experts, int bm, int32_t* row_offsets,
                                  int32_t* tile_offsets, unsigned long long* tile_counters) {
  extern __shared__ int expert_rows[];  // [experts]: counts, then first rows
  const int e = threadIdx.x;
  if (e < experts) {
    int total = 0;
#pragma unroll 8
    for (int c = 0; c < chunks; ++c) total += chunk_counts[c * int64_t{experts} + e];
    expert_rows[e] = total;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int rows = 0, tiles = 0;
    for (int x = 0; x < experts; ++x) {
      const int n = expert_rows[x];
      row_offsets[x] = rows;
      tile_offsets[x] = tiles;
      expert_rows[x] = rows;
      rows += n;
      tiles += (n + bm - 1) / bm;
    }
    row_offsets[experts] = rows;
    tile_offsets[experts] = tiles;
    tile_counters[0] = 0;
    tile_counters[1] = 0;
  }
  __syncthreads();
  if (e < experts) {
    int next = expert_rows[e];
    for (int c = 0; c < chunks; ++c) {
      int32_t& slot = chunk_counts[c * int64_t{experts} + e];
      const int n = slot;
      slot = next;
      next += n;
    }
  }
}

// Block c places the pairs of chunk c: a pair's row is its chunk's first row for its expert
// plus the pairs before it in the chunk with the same expert. Pairs of other ranks' experts
// get row -1.
__global__ void chunk_fill_kernel(const int32_t* ids, const float* w, int64_t pairs, int top_k, int first, int experts,
                                  const int32_t* chunk_first, int32_t* perm_token, float* perm_weight,
                                  int32_t* pair_row) {
  extern __shared__ int warp_count[];  // [kDispatchWarps, experts]: each warp's pairs per expert
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int j = threadIdx.x; j < kDispatchWarps * experts; j += blockDim.x) warp_count[j] = 0;
  __syncthreads();
  const int64_t i = blockIdx.x * int64_t{kDispatchChunk} + threadIdx.x;
  const int e = i < pairs ? ids[i] - first : -1;
  const bool mine = e >= 0 && e < experts;
  const unsigned same = __match_any_sync(0xffffffffu, mine ? e : -1);
  const int before_in_warp = __popc(same & ((1u << lane) - 1u));
  if (mine && before_in_warp == 0) warp_count[warp * experts + e] = __popc(same);
  __syncthreads();
  if (i >= pairs) return;
  if (!mine) {
    pair_row[i] = -1;
    return;
  }
  int pos = chunk_first[blockIdx.x * int64_t{experts} + e] + before_in_warp;
  for (int w2 = 0; w2 < warp; ++w2) pos += warp_count[w2 * experts + e];
  perm_token[pos] = static_cast<int32_t>(i / top_k);
  perm_weight[pos] = w[i];
  pair_row[i] = pos;
}

__global__ void silu_rows_kernel(const bf16* gu, bf16* act, const int32_t* total_rows, int64_t I, int64_t r0) {
  const int64_t r = r0 + blockIdx.y;
  if (r >= *total_rows) return;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < I; c += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f(gu[r * 2 * I + c]);
    const float s = silu_bf(g);
    act[r * I + c] = to_bf(s * to_f(gu[r * 2 * I + I + c]));
  }
}

// out[t] = sum over the token's pairs, in slot order, of weight * y[row], then + shared[t] where
// given (the shared experts' output: the add of a separate pass, fused). Eight columns per
// thread (16-byte loads of y); `vector` also moves out and shared as float4 (both 16-byte aligned).
__global__ void combine_kernel(const int32_t* pair_row, const float* perm_weight, const bf16* y, int top_k, float* out,
                               int64_t os, const float* shared, int64_t ss, int64_t H, bool vector) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x * int64_t{8}; c < H; c += blockDim.x * int64_t{8}) {
    float acc[8] = {};
    for (int j = 0; j < top_k; ++j) {
      const int r = pair_row[t * top_k + j];
      if (r < 0) continue;
      const float wr = perm_weight[r];
      const uint4 v = *reinterpret_cast<const uint4*>(y + int64_t{r} * H + c);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[q]));
        acc[2 * q] += wr * f.x;
        acc[2 * q + 1] += wr * f.y;
      }
    }
    if (shared) {
      const float* sh = shared + t * ss + c;
      float add[8];
      if (vector) {
        const float4 a = reinterpret_cast<const float4*>(sh)[0], b = reinterpret_cast<const float4*>(sh)[1];
        add[0] = a.x, add[1] = a.y, add[2] = a.z, add[3] = a.w, add[4] = b.x, add[5] = b.y, add[6] = b.z, add[7] = b.w;
      } else {
#pragma unroll
        for (int q = 0; q < 8; ++q) add[q] = sh[q];
      }
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] += add[q];
    }
    float* o = out + t * os + c;
    if (vector) {
      reinterpret_cast<float4*>(o)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      reinterpret_cast<float4*>(o)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
#pragma unroll
      for (int q = 0; q < 8; ++q) o[q] = acc[q];
    }
  }
}

// --------------------------------------------------------------------------------- grouped GEMM

constexpr int kGBM = 128, kGBN = 128, kGPad = 8, kGThreads = 256;

template <int BK, int STAGES>
constexpr size_t gemm_smem() {
  return sizeof(bf16) * STAGES * (kGBM + kGBN) * (BK + kGPad);
}

// C_e = A_e W_e^T for every local expert in one launch. blockIdx.x walks all (expert, m-tile)
// pairs found on the device; blocks past the last tile exit at once.
//
// With FUSE_SILU, W_e is [gate (N/2 rows) ; up (N/2 rows)] and the block computes the 64
// activation columns [a0, a0 + 64): its 128 B rows alternate 16 gate rows and the matching
// 16 up rows, so each warp holds both halves of its 16 columns and writes silu(g) * u.
template <int BK, int STAGES, bool FUSE_SILU>
__global__ void __launch_bounds__(kGThreads) grouped_gemm_kernel(GroupedArgs g) {
  constexpr int kRow = BK + kGPad;  // shared-memory row stride in bf16
  extern __shared__ __align__(16) unsigned char gsmem[];
  bf16* sA = reinterpret_cast<bf16*>(gsmem);
  bf16* sB = sA + STAGES * kGBM * kRow;
  const ExpertTile et = expert_tile(g, blockIdx.x, kGBM);
  if (et.expert < 0) return;
  const int e = et.expert, row0 = et.row0, rows = et.rows;
  const int half = g.n / 2;
  const int n0 = blockIdx.y * (FUSE_SILU ? kGBN / 2 : kGBN);  // first output column
  const bf16* W = g.w + int64_t{e} * g.n * g.k;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_m = warp / 4, warp_n = warp % 4;
  const int k_tiles = (g.k + BK - 1) / BK;

  // The weight row behind B tile row r, or -1 past the end.
  auto b_row = [&](int r) -> int {
    if (!FUSE_SILU) return n0 + r < g.n ? n0 + r : -1;
    const int col = n0 + (r / 32) * 16 + r % 16;  // activation column
    if (col >= half) return -1;
    return (r / 16) % 2 == 0 ? col : half + col;
  };

  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * BK;
    for (int i = tid; i < kGBM * (BK / 8); i += kGThreads) {
      const int r = i / (BK / 8), cc = (i % (BK / 8)) * 8;
      const bool ok = r < rows && k0 + cc < g.k;
      const int64_t src_row = g.a_rows ? (ok ? g.a_rows[row0 + r] : 0) : row0 + r;
      cp_async_16(sA + (stage * kGBM + r) * kRow + cc, ok ? g.a + src_row * g.lda + k0 + cc : g.a, ok);
    }
    for (int i = tid; i < kGBN * (BK / 8); i += kGThreads) {
      const int r = i / (BK / 8), cc = (i % (BK / 8)) * 8;
      const int wr = b_row(r);
      const bool ok = wr >= 0 && k0 + cc < g.k;
      cp_async_16(sB + (stage * kGBN + r) * kRow + cc, ok ? W + int64_t{wr} * g.k + k0 + cc : g.w, ok);
    }
  };

  float acc[4][4][4] = {};
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < k_tiles) load_stage(next % STAGES, next);
    cp_async_commit();
    const bf16* a_st = sA + (kt % STAGES) * kGBM * kRow;
    const bf16* b_st = sB + (kt % STAGES) * kGBN * kRow;
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t af[4][4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
        ldmatrix_x4(af[mt], a_st + (warp_m * 64 + mt * 16 + lane % 16) * kRow + ks * 16 + (lane / 16) * 8);
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        uint32_t b[4];
        const int m = lane / 8;
        ldmatrix_x4(b, b_st + (warp_n * 32 + p * 16 + (m / 2) * 8 + lane % 8) * kRow + ks * 16 + (m % 2) * 8);
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          mma_bf16(acc[mt][2 * p], af[mt], b[0], b[1]);
          mma_bf16(acc[mt][2 * p + 1], af[mt], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  const int gq = lane / 4, c4 = lane % 4;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
    const int r_a = warp_m * 64 + mt * 16 + gq, r_b = r_a + 8;
    if (FUSE_SILU) {
      // n8 tiles 0, 1 are gate columns, 2, 3 the up columns of the same activations.
      const int ldc = half;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int col = n0 + warp_n * 16 + nt * 8 + 2 * c4;
        if (col >= half) continue;
        float v[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float gte = round_bf(acc[mt][nt][q]), up = round_bf(acc[mt][nt + 2][q]);
          v[q] = silu_bf(gte) * up;
        }
        if (r_a < rows) *reinterpret_cast<uint32_t*>(g.c + int64_t{row0 + r_a} * ldc + col) = pack_bf16(v[0], v[1]);
        if (r_b < rows) *reinterpret_cast<uint32_t*>(g.c + int64_t{row0 + r_b} * ldc + col) = pack_bf16(v[2], v[3]);
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = n0 + warp_n * 32 + nt * 8 + 2 * c4;
        if (col >= g.n) continue;
        if (r_a < rows)
          *reinterpret_cast<uint32_t*>(g.c + int64_t{row0 + r_a} * g.n + col) = pack_bf16(acc[mt][nt][0], acc[mt][nt][1]);
        if (r_b < rows)
          *reinterpret_cast<uint32_t*>(g.c + int64_t{row0 + r_b} * g.n + col) = pack_bf16(acc[mt][nt][2], acc[mt][nt][3]);
      }
    }
  }
}

template <int BK, int STAGES, bool FUSE>
void launch_grouped(const GroupedArgs& g, int64_t max_rows, cudaStream_t s) {
  constexpr size_t smem = gemm_smem<BK, STAGES>();
  E3_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_kernel<BK, STAGES, FUSE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  // At most one partial tile per expert beyond the full ones.
  const int64_t max_tiles = (max_rows + kGBM - 1) / kGBM + g.experts;
  const int cols = FUSE ? g.n / 2 : g.n, per_block = FUSE ? kGBN / 2 : kGBN;
  const dim3 grid(static_cast<unsigned>(max_tiles), static_cast<unsigned>((cols + per_block - 1) / per_block));
  grouped_gemm_kernel<BK, STAGES, FUSE><<<grid, kGThreads, smem, s>>>(g);
  E3_CUDA_LAUNCH_CHECK("grouped_gemm");
}

constexpr int kHopperVariant = CudaOptions::kHopperGemmVariant, kHopperWsVariant = CudaOptions::kHopperWsGemmVariant,
              kHopperWsShortKVariant = CudaOptions::kHopperWsShortKGemmVariant,
              kHopperWsSlabMajorVariant = CudaOptions::kHopperWsSlabMajorGemmVariant,
              kHopperWsCountedVariant = CudaOptions::kHopperWsCountedGemmVariant,
              kHopperWsCountedRegsVariant = CudaOptions::kHopperWsCountedRegsGemmVariant;
bool is_hopper(int variant) { return variant >= kHopperVariant && variant <= kHopperWsCountedRegsVariant; }
HopperGemm hopper_kernel(int variant) {
  return variant == kHopperWsVariant           ? HopperGemm::WarpSpecialized
         : variant == kHopperWsShortKVariant    ? HopperGemm::WarpSpecializedShortK
         : variant == kHopperWsSlabMajorVariant ? HopperGemm::WarpSpecializedSlabMajor
         : variant == kHopperWsCountedVariant   ? HopperGemm::WarpSpecializedCounted
         : variant == kHopperWsCountedRegsVariant ? HopperGemm::WarpSpecializedCountedRegs
                                                : HopperGemm::CpAsync;
}

template <bool FUSE>
void grouped_gemm_portable(const GroupedArgs& g, int64_t max_rows, cudaStream_t s, int variant) {
  switch (variant) {
    case 1: return launch_grouped<64, 3, FUSE>(g, max_rows, s);
    case 2: return launch_grouped<32, 4, FUSE>(g, max_rows, s);
    case 3: return launch_grouped<64, 2, FUSE>(g, max_rows, s);
    default: return launch_grouped<32, 3, FUSE>(g, max_rows, s);
  }
}

void grouped_gemm(const GroupedArgs& g, bool fuse, int64_t max_rows, cudaStream_t s, int variant,
                  const uint8_t* l2_side_of_sm) {
  if (is_hopper(variant)) return grouped_gemm_hopper(g, fuse, max_rows, s, hopper_kernel(variant), l2_side_of_sm);
  if (fuse) grouped_gemm_portable<true>(g, max_rows, s, variant);
  else grouped_gemm_portable<false>(g, max_rows, s, variant);
}

}  // namespace

void moe_route(Tensor logits, const Tensor* correction_bias, const RouterParams& p, Tensor topk_ids,
               Tensor topk_weights, cudaStream_t s) {
  E3_REQUIRE(logits.dtype == DType::F32 && topk_ids.dtype == DType::I32 && topk_weights.dtype == DType::F32 &&
                 logits.cols == p.num_experts && topk_ids.cols == p.top_k && topk_weights.cols == p.top_k &&
                 p.num_experts <= 512 && p.n_group <= 32 && p.num_experts % p.n_group == 0 &&
                 (p.select != RouterSelect::NoAuxTc || (correction_bias && correction_bias->dtype == DType::F32)),
             ErrorKind::Internal, "cuda moe_route: logits {} ids {} experts {} groups {}", logits.shape_str(),
             topk_ids.shape_str(), p.num_experts, p.n_group);
  if (logits.rows == 0) return;
  RouterArgs a{p.num_experts, p.top_k, p.n_group, p.topk_group, p.scoring == RouterScoring::Sigmoid, p.norm_topk_prob,
               p.select == RouterSelect::Greedy ? 0 : p.select == RouterSelect::GroupLimitedGreedy ? 1 : 2,
               p.routed_scaling_factor};
  const size_t smem = sizeof(float) * 2 * p.num_experts * kRouteWarps;
  route_kernel<<<blocks_for(logits.rows, kRouteWarps), kRouteWarps * 32, smem, s>>>(
      logits.as<float>(), logits.stride, correction_bias ? correction_bias->as<float>() : nullptr, a,
      topk_ids.as<int32_t>(), topk_ids.stride, topk_weights.as<float>(), topk_weights.stride, logits.rows);
  E3_CUDA_LAUNCH_CHECK("moe_route");
}

int resolve_gemm_variant(int requested, bool hopper_available) {
  E3_REQUIRE(!is_hopper(requested) || hopper_available, ErrorKind::Usage,
             "E3_GEMM_VARIANT={} asks for an sm_90a grouped GEMM, which this GPU or build lacks", requested);
  // The counted n-tile-major walk keeps the m-tiles that share a weight slab in flight together, so
  // the slab comes from L2 rather than device memory (docs/PERFORMANCE.md, tenth session). Quantized
  // experts become wgmma's register operand (eleventh session); bf16 ones run as with 8.
  if (requested == CudaOptions::kAutoGemmVariant) return hopper_available ? kHopperWsCountedRegsVariant : 0;
  return requested;
}

bool moe_reads_quantized(const ExpertStack& ex, const MoeKernelChoice& k) {
  return k.experts_in_gemm && ex.gate_up_q.quantized() && is_hopper(k.gemm_variant) &&
         grouped_gemm_hopper_reads(ex.gate_up_q) && grouped_gemm_hopper_reads(ex.down_q);
}

size_t moe_scratch_bytes(int64_t tokens, const MoeScratchShape& shape, bool fuse_silu) {
  return carve(nullptr, tokens, shape.top_k, shape.local_experts, shape.hidden, shape.intermediate, shape.quantized,
               fuse_silu)
      .bytes;
}

void moe_experts(Tensor x, Tensor topk_ids, Tensor topk_weights, const ExpertStack& stack, Tensor out,
                 Tensor shared, Tensor scratch, const MoeKernelChoice& k, cudaStream_t s, const MoePhaseHook& hook) {
  const int64_t M = x.rows, H = x.cols, I = stack.intermediate;
  const int K = static_cast<int>(topk_ids.cols), E = stack.num_experts;
  const bool quantized = stack.gate_up_q.quantized();
  const int variant = k.gemm_variant;
  // The Hopper GEMM converts quantized B tiles itself: no dequantized copy of the experts.
  const bool in_gemm = quantized && moe_reads_quantized(stack, k);
  const Layout l = carve(scratch.data, M, K, E, H, I, quantized && !in_gemm, k.fuse_silu);
  E3_REQUIRE(l.bytes <= scratch.bytes(), ErrorKind::Internal, "moe scratch of {} bytes, {} needed", scratch.bytes(),
             l.bytes);
  auto mark = [&](const char* phase) {
    if (hook) hook(phase);
  };
  ExpertStack ex = stack;
  if (quantized) {
    E3_REQUIRE(stack.gate_up_q.count == 2 * E && stack.gate_up_q.rows == I && stack.gate_up_q.cols == H &&
                   stack.down_q.count == E && stack.down_q.rows == H && stack.down_q.cols == I,
               ErrorKind::Internal, "cuda moe_experts: quantized experts of the wrong shape");
    ex.gate_up = Tensor{in_gemm ? nullptr : l.deq_gate_up, DType::BF16, E * 2 * I, H, H};
    ex.down = Tensor{in_gemm ? nullptr : l.deq_down, DType::BF16, E * H, I, I};
  }
  E3_REQUIRE(x.dtype == DType::BF16 && out.dtype == DType::F32 && topk_ids.contiguous() && topk_weights.contiguous() &&
                 ex.gate_up.rows == E * 2 * I && ex.gate_up.cols == H && ex.down.rows == E * H && ex.down.cols == I &&
                 H % 8 == 0 && I % 8 == 0 && x.stride % 8 == 0 && out.rows == M && out.cols == H && E <= 1024 &&
                 (!shared.data || (shared.dtype == DType::F32 && shared.rows == M && shared.cols == H &&
                                   shared.data != out.data)),
             ErrorKind::Internal, "cuda moe_experts: x {} gate_up {} down {} out {} shared {}, {} local experts",
             x.shape_str(), ex.gate_up.shape_str(), ex.down.shape_str(), out.shape_str(),
             shared.data ? shared.shape_str() : "none", E);
  if (M == 0) return;
  if (quantized && !in_gemm) {
    // Every local expert, whether or not a token picked it: which ones did is known only on
    // the device, and the host does not wait for it.
    mark("moe_dequantize");
    dequantize(stack.gate_up_q, ex.gate_up, s);
    dequantize(stack.down_q, ex.down, s);
  }
  const int64_t pairs = M * K;
  const int64_t max_rows = M * std::min(K, E);

  mark("moe_dispatch");
  const unsigned chunks = blocks_for(pairs, kDispatchChunk);
  const size_t expert_ints = sizeof(int) * static_cast<size_t>(E);
  chunk_count_kernel<<<chunks, kDispatchChunk, expert_ints, s>>>(topk_ids.as<int32_t>(), pairs, ex.first_expert, E,
                                                                 l.chunk_counts);
  const int tile_rows = is_hopper(variant) ? grouped_gemm_hopper_tile_rows() : kGBM;
  chunk_scan_kernel<<<1, (E + 31) / 32 * 32, expert_ints, s>>>(l.chunk_counts, static_cast<int>(chunks), E, tile_rows,
                                                              l.row_offsets, l.tile_offsets, l.tile_counters);
  chunk_fill_kernel<<<chunks, kDispatchChunk, kDispatchWarps * expert_ints, s>>>(
      topk_ids.as<int32_t>(), topk_weights.as<float>(), pairs, K, ex.first_expert, E, l.chunk_counts, l.perm_token,
      l.perm_weight, l.pair_row);
  E3_CUDA_LAUNCH_CHECK("moe dispatch");

  const GroupedArgs gate_up{x.as<bf16>(), l.perm_token, x.stride, ex.gate_up.as<bf16>(), nullptr, l.row_offsets,
                            l.tile_offsets, E, static_cast<int>(2 * I), static_cast<int>(H), l.tile_counters};
  if (k.fuse_silu) {
    mark("moe_gemm_gate_up_silu");  // A rows gathered from x by token, in place; silu(g) * u in the epilogue
    GroupedArgs fused = gate_up;
    fused.c = l.act;
    if (in_gemm) grouped_gemm_hopper_quantized(fused, stack.gate_up_q, true, max_rows, s, hopper_kernel(variant),
                                                 k.l2_side_of_sm);
    else grouped_gemm(fused, true, max_rows, s, variant, k.l2_side_of_sm);
  } else {
    mark("moe_gemm_gate_up");
    GroupedArgs plain = gate_up;
    plain.c = l.gate_up;
    if (in_gemm) grouped_gemm_hopper_quantized(plain, stack.gate_up_q, false, max_rows, s, hopper_kernel(variant),
                                                 k.l2_side_of_sm);
    else grouped_gemm(plain, false, max_rows, s, variant, k.l2_side_of_sm);
    mark("moe_silu");
    const unsigned cols_blocks = std::min<unsigned>(blocks_for(I, 256), 64u);
    for (int64_t r0 = 0; r0 < max_rows; r0 += 65535) {
      const int64_t n = std::min<int64_t>(65535, max_rows - r0);
      silu_rows_kernel<<<dim3(cols_blocks, static_cast<unsigned>(n)), 256, 0, s>>>(l.gate_up, l.act, l.row_offsets + E,
                                                                                   I, r0);
    }
    E3_CUDA_LAUNCH_CHECK("moe silu");
  }

  mark("moe_gemm_down");
  const GroupedArgs down{l.act,    nullptr, I, ex.down.as<bf16>(), l.y, l.row_offsets, l.tile_offsets, E,
                         static_cast<int>(H), static_cast<int>(I), l.tile_counters + 1};
  if (in_gemm)
    grouped_gemm_hopper_quantized(down, stack.down_q, false, max_rows, s, hopper_kernel(variant), k.l2_side_of_sm);
  else grouped_gemm(down, false, max_rows, s, variant, k.l2_side_of_sm);

  mark("moe_combine");
  const bool vector = aligned_by(out, 4) && (!shared.data || aligned_by(shared, 4));
  combine_kernel<<<static_cast<unsigned>(M), 256, 0, s>>>(l.pair_row, l.perm_weight, l.y, K, out.as<float>(),
                                                          out.stride, shared.data ? shared.as<float>() : nullptr,
                                                          shared.stride, H, vector);
  E3_CUDA_LAUNCH_CHECK("moe combine");
  mark(nullptr);
}

}  // namespace e3::kernels::cuda
