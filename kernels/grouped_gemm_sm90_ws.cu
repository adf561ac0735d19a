// The warp-specialised grouped expert GEMM on Hopper (sm_90a), E3_GEMM_VARIANT=5 and the
// default there. One persistent block per SM walks the (expert m-tile, n-tile) pairs: within
// each expert m-tile major (the n-tiles that share an A tile side by side), or with
// E3_GEMM_VARIANT=7 n-tile major (the m-tiles that share a B slab, the expert's weights, side by
// side, so that they read it from L2 at about the same time rather than each from device memory),
// and with E3_GEMM_VARIANT=8 in that order from a counter: each block takes the next tile when its
// loader is free, so the tiles in flight stay a window of consecutive ones however the blocks'
// speeds drift apart (with every gridDim-th tile, a slow block falls behind its neighbours).
// With the L2 sides known (E3_L2_SIDES, find_l2_sides), the blocks beside one half of L2 take
// tiles from the counter's front and the others from its back, so that an expert's m-tiles run
// on one half (same bits; the partition link's traffic fell 17.5% but the time did not).
// Warpgroup 0 only loads: its first thread has the tensor copy engine bring each B tile (the
// experts' weights, contiguous rows, so a 2-D tensor map serves every expert), while its 128
// threads gather the A rows with cp.async (the token permutation, which the copy engine cannot
// follow), or, where A's rows are the expert-grouped rows themselves (the down GEMM), the
// copy engine brings A too. Warpgroups 1 and 2 only compute (wgmma m64n256k16, 64 rows each) and run the
// epilogue, while the loader already fills the stages of the next tile. A bf16 expert's last m-tile
// of 112 rows or fewer runs transposed (weights as A, its tokens as N in steps of 16), so that the
// tensor cores do not multiply the padding rows. The loader finds each
// tile's expert and rows (a forward walk over tile_offsets, since a block's tiles only move
// forward) and hands them to the computing warpgroups through a two-slot ring, so that no
// computing thread waits on those loads. Stages are handed over
// through mbarriers: `full` (the copy engine's bytes, and each loader thread's cp.async copies
// once they land) and `empty` (one arrival per computing warp once its wgmma has read the
// stage). Every output element sums its
// k-tiles in the same order as grouped_gemm_sm90.cu, so both kernels give the same bits.
//
// With quantized experts (INT4 or FP8) a stage carries the packed bytes (swizzled, so that reading
// them meets no bank conflicts); each computing thread converts one B row into one of three bf16
// tiles while the previous step's wgmma runs, or (W_REGS, E3_GEMM_VARIANT=9) builds the weights
// as wgmma's register operand from them (grouped_gemm_sm90_regs.cuh).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

#include "kernels/grouped_gemm_sm90_regs.cuh"
#include "kernels/wgmma_sm90.cuh"

namespace e3::kernels::cuda {
namespace {

using namespace sm90;

constexpr int kBM = 128, kBN = kTileN;
constexpr int kThreads = 384, kLoaderThreads = 128, kComputeThreads = 256;
constexpr int kTileRing = 2;
constexpr int kBBytes = kBN * kTileK * 2;  // a converted (bf16, 64-column) B tile
// Registers per thread after setmaxnreg: the loader needs few, the 128 accumulators many.
constexpr int kLoaderRegs = 56, kComputeRegs = 224;
static_assert(kLoaderRegs * kLoaderThreads + kComputeRegs * kComputeThreads <= 65536, "register file");

// BK, the k-tile: 64 columns (4 stages of 48 KiB), or 32 (8 stages of 24 KiB: the same shared
// memory, twice the loads in flight, for B that comes from device memory rather than L2; bf16
// experts only). Quantized B: 4 stages and three converted tiles, or with W_REGS (no converted
// tiles) as many stages as fit 192 KiB (8 for INT4, 6 for FP8).
template <int QB, int BK, bool W_REGS = false>
struct Smem {
  static_assert(BK == kTileK || (BK == 32 && QB == kBf16), "quantized B tiles are 64 columns");
  static_assert(!W_REGS || QB != kBf16, "weights in registers are converted quantized ones");
  static constexpr int kABytes = kBM * BK * 2;
  static constexpr int kBStage = QB == kBf16 ? kBN * BK * 2 : kBN * packed_row_bytes<QB>();
  static constexpr int kStage = kABytes + kBStage;  // a multiple of 1024: the swizzles' alignment
  static constexpr int kStages = W_REGS ? (192 * 1024) / kStage : BK == 64 ? 4 : 8;
  static constexpr int kConverted = QB == kBf16 || W_REGS ? 0 : 3;
  static constexpr size_t kBytes = size_t{kStages} * kStage + size_t{kConverted} * kBBytes + 1024;
};

#ifdef E3_WGMMA
__device__ __forceinline__ void compute_barrier() { asm volatile("bar.sync 1, %0;\n" ::"n"(kComputeThreads) : "memory"); }
#endif

// A_TMA: A's rows are the expert-grouped rows (no a_rows), loaded through a_map.
template <bool FUSE_SILU, int QB, bool A_TMA, int BK, bool W_REGS>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_ws_kernel(const __grid_constant__ CUtensorMap b_map, const __grid_constant__ CUtensorMap a_map,
                           GroupedArgs g, QuantWeights qw, int n_tiles, WsSchedule schedule) {
#ifdef E3_WGMMA
  using S = Smem<QB, BK, W_REGS>;
  constexpr int kStages = S::kStages, kABytes = S::kABytes;
  extern __shared__ unsigned char raw_smem[];
  __shared__ alignas(8) uint64_t full_bar[kStages], empty_bar[kStages], ring_full[kTileRing], ring_empty[kTileRing];
  __shared__ int4 ring[kTileRing];  // expert (-1: no more tiles), row0, rows, n0
  __shared__ int taken[2];          // the loader's tiles from the counter, by parity
  const uint32_t raw = smem_addr(raw_smem);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = raw_smem + (base - raw);
  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      // the expect_tx arrival, and each loader thread's cp.async arrival
      mbar_init(smem_addr(&full_bar[s]), A_TMA ? 1 : kLoaderThreads + 1);
      mbar_init(smem_addr(&empty_bar[s]), kComputeThreads / 32);
    }
    for (int s = 0; s < kTileRing; ++s) {
      mbar_init(smem_addr(&ring_full[s]), 1);
      mbar_init(smem_addr(&ring_empty[s]), kComputeThreads / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int k_tiles = (g.k + BK - 1) / BK;
  const int per_block = FUSE_SILU ? kBN / 2 : kBN;
  constexpr int kPackedRow = packed_row_bytes<QB>();
  // A computing warp's j-th tile from the loader's ring: expert (-1: no more tiles), row0, rows, n0.
  auto take_tile = [&](int j, int lane) {
    const int slot = j % kTileRing;
    mbar_wait(smem_addr(&ring_full[slot]), (j / kTileRing) & 1);
    const int4 info = ring[slot];
    __syncwarp();
    if (lane == 0) mbar_arrive(smem_addr(&ring_empty[slot]));
    return info;
  };

  if (wg == 0) {
    // --- loader ---
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kLoaderRegs));
    constexpr int kChunks = BK / 8;  // 16-byte chunks of an A row
    const int chunk = tid % kChunks;
    constexpr int kAPer = kBM * kChunks / kLoaderThreads;
    int stage = 0;
    uint32_t phase = 0;
    const int total = g.tile_offsets[g.experts] * n_tiles;
    // With the L2 sides known, a block beside the second half of L2 walks from the back.
    bool from_back = false;
    if (schedule.counted && schedule.l2_side_of_sm) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
      from_back = sm < static_cast<unsigned>(kL2SideSlots) && schedule.l2_side_of_sm[sm] == 1;
    }
    int expert = from_back ? g.experts - 1 : 0;
    // A block's tiles only move one way (forward, or backward from the back), from the counter too.
    auto next_tile = [&](int t, int j) {
      if (!schedule.counted) return j == 0 ? static_cast<int>(blockIdx.x) : t + static_cast<int>(gridDim.x);
      if (tid == 0) {
        // The front's next tile is the count taken from the front; the back's is total - 1 -
        // the count taken from the back; either is free while the two counts sum below total.
        const unsigned long long old = atomicAdd(g.tile_counter, from_back ? 1ull << 32 : 1ull);
        const int front = static_cast<int>(old & 0xffffffffu), back = static_cast<int>(old >> 32);
        taken[j & 1] = front + back >= total ? total : from_back ? total - 1 - back : front;
      }
      asm volatile("bar.sync 2, %0;\n" ::"n"(kLoaderThreads) : "memory");
      return taken[j & 1];
    };
    for (int j = 0, t = next_tile(0, 0);; t = next_tile(t, ++j)) {
      // Expert e's tiles are t in [tile_offsets[e], tile_offsets[e + 1]) * n_tiles whatever the
      // order inside.
      ExpertTile et;
      int n0 = 0;
      if (t < total) {
        if (from_back) {
          while (g.tile_offsets[expert] * n_tiles > t) --expert;
        } else {
          while (g.tile_offsets[expert + 1] * n_tiles <= t) ++expert;
        }
        const int local = t - g.tile_offsets[expert] * n_tiles;
        const int m_tiles = g.tile_offsets[expert + 1] - g.tile_offsets[expert];
        const int m_local = schedule.slab_major ? local % m_tiles : local / n_tiles;
        n0 = (schedule.slab_major ? local / m_tiles : local % n_tiles) * per_block;
        et.expert = expert;
        et.row0 = g.row_offsets[expert] + m_local * kBM;
        et.rows = min(kBM, g.row_offsets[expert + 1] - et.row0);
      }
      if (tid == 0) {
        const int slot = j % kTileRing;
        mbar_wait(smem_addr(&ring_empty[slot]), ((j / kTileRing) & 1) ^ 1);
        ring[slot] = make_int4(et.expert, et.row0, et.rows, n0);
        mbar_arrive(smem_addr(&ring_full[slot]));
      }
      if (t >= total) break;
      // B rows in the tensor map (expert e's N rows start at e N): two boxes of 128 rows, the
      // gate rows and their up rows with the silu fused, else 256 consecutive rows.
      const int b_row0 = et.expert * g.n + n0, b_row1 = FUSE_SILU ? b_row0 + g.n / 2 : b_row0 + kBN / 2;
      const bf16* a_src[kAPer];
#pragma unroll
      for (int j = 0; j < kAPer; ++j) {
        if (A_TMA) break;
        const int r = tid / kChunks + j * (kLoaderThreads / kChunks);
        const int64_t src_row = r < et.rows ? (g.a_rows ? g.a_rows[et.row0 + r] : et.row0 + r) : -1;
        a_src[j] = src_row >= 0 ? g.a + src_row * g.lda + chunk * 8 : nullptr;
      }
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(smem_addr(&empty_bar[stage]), phase ^ 1);
        const uint32_t sa = base + stage * S::kStage, sb = sa + kABytes;
        if (tid == 0) {
          const uint32_t full = smem_addr(&full_bar[stage]);
          mbar_arrive_expect_tx(full, S::kBStage + (A_TMA ? kABytes : 0));
          if (A_TMA) tma_load_2d(sa, &a_map, full, kt * BK, et.row0);
          const int inner = QB == kBf16 ? kt * BK : kt * kPackedRow;
          tma_load_2d(sb, &b_map, full, inner, b_row0);
          tma_load_2d(sb + S::kBStage / 2, &b_map, full, inner, b_row1);
        }
        if (!A_TMA) {
          const int k0 = kt * BK;
          const bool k_ok = k0 + chunk * 8 < g.k;
          unsigned char* sa_ptr = smem + stage * S::kStage;
#pragma unroll
          for (int j = 0; j < kAPer; ++j) {
            const int r = tid / kChunks + j * (kLoaderThreads / kChunks);
            const bool ok = k_ok && a_src[j];
            cp_async_16(sa_ptr + swizzled_offset<BK>(r, chunk), ok ? a_src[j] + k0 : g.a, ok);
          }
          cp_async_arrive_noinc(smem_addr(&full_bar[stage]));
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    cp_async_wait<0>();
  } else if constexpr (W_REGS) {
    // --- compute, the weights as wgmma's register operand (C^T = W X^T) ---
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kComputeRegs));
    const int ctid = tid - kLoaderThreads, cwg = ctid / 128, warp = (ctid / 32) % 4, lane = tid % 32;
    int stage = 0;
    uint32_t phase = 0;
    // One tile of N tokens.
    auto regs_tile = [&](auto tokens, const int4 info) {
      constexpr int N = decltype(tokens)::value;
      const int n0 = info.w;
      int64_t srow[2][2];
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          srow[b][h] = scale_row<QB>(qw, quant_row<FUSE_SILU>(g, qw, info.x, n0,
                                                              weight_tile_row<FUSE_SILU>(cwg, b, warp, lane, h)));
      float d[2][64];
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int i = 0; i < 64; ++i) d[b][i] = 0.0f;
      auto fence_accumulators = [&] {
#pragma unroll
        for (int b = 0; b < 2; ++b)
#pragma unroll
          for (int i = 0; i < N / 2; ++i) fence_operand(d[b][i]);
      };
      // Each k-step is two wgmma groups, its 32-column halves, each from its own fragments: one
      // half's are built while the other half's group runs (16 registers each: the 128
      // accumulators leave no room for a whole k-step twice).
      uint32_t frag_lo[2][2][4], frag_hi[2][2][4];
      // The scales are loaded two k-steps before their use: the stages leave L1 little room, so a
      // load may wait on L2 or device memory.
      FragScales scales = fetch_fragment_scales<QB>(qw, srow, 0), scales_next, scales_after;
      if (k_tiles > 1) scales_next = fetch_fragment_scales<QB>(qw, srow, 1);
      auto build = [&](int half, uint32_t (&f)[2][2][4]) {
        half_tile_fragments<QB, FUSE_SILU>(smem + stage * S::kStage + S::kABytes, cwg, warp, lane, half, scales,
                                           qw.f32_scale, f);
      };
      auto issue = [&](int half, uint32_t (&f)[2][2][4]) {
        const uint32_t tokens = base + stage * S::kStage + half * 64;
        fence_accumulators();
        fence_fragments(f);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 2; ++kk)
#pragma unroll
          for (int b = 0; b < 2; ++b) wgmma_m64nNk16_rs<N>(d[b], f[b][kk], sw128_desc(tokens + kk * 32));
        wgmma_commit();
      };
      auto wait_stage = [&] {
        mbar_wait(smem_addr(&full_bar[stage]), phase);
        if (!A_TMA) fence_async_shared();
      };
      wait_stage();
      build(0, frag_lo);
      int prev_stage = -1;
      for (int kt = 0; kt < k_tiles; ++kt) {
        if (kt + 2 < k_tiles) scales_after = fetch_fragment_scales<QB>(qw, srow, kt + 2);
        issue(0, frag_lo);
        // The previous k-step's second group has read its stage and frag_hi.
        wgmma_wait<1>();
        fence_accumulators();
        fence_fragments(frag_hi);
        if (prev_stage >= 0) {
          __syncwarp();
          if (lane == 0) mbar_arrive(smem_addr(&empty_bar[prev_stage]));
        }
        build(1, frag_hi);
        issue(1, frag_hi);
        wgmma_wait<1>();  // this k-step's first group: frag_lo is free
        fence_accumulators();
        fence_fragments(frag_lo);
        prev_stage = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
        if (kt + 1 < k_tiles) {
          scales = scales_next;
          scales_next = scales_after;
          wait_stage();
          build(0, frag_lo);
        }
      }
      wgmma_wait<0>();
      fence_accumulators();
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_addr(&empty_bar[prev_stage]));
      store_transposed<FUSE_SILU>(g, d, info.y, info.z, n0, cwg, warp, lane);
    };
    for (int j = 0;; ++j) {
      const int4 info = take_tile(j, lane);
      if (info.x < 0) break;
      // Always 128 tokens: call 48 (2026-12-07, H100) found the last m-tile at N in steps of 16
      // 5% slower for INT4 and FP8 experts (kimi_k2_3layer), where the bf16 experts gained.
      regs_tile(std::integral_constant<int, 128>{}, info);
    }
  } else {
    // --- compute ---
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kComputeRegs));
    const int ctid = tid - kLoaderThreads, cwg = wg - 1, warp = (tid / 32) % 4, lane = tid % 32;
    const uint32_t converted = base + kStages * S::kStage;
    int stage = 0, cbuf = 0;
    uint32_t phase = 0;
    auto release = [&](int s) {
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_addr(&empty_bar[s]));
    };
    // Quantized B: wait for the stage of the next step and convert B row ctid of it into the
    // converted tile cbuf (last read three steps ago, by wgmmas every warpgroup has waited for
    // before it reached the barrier of the conversion after them).
    // cp.async's writes reach the tensor cores' proxy through each reader's fence after the wait.
    auto wait_full = [&] {
      mbar_wait(smem_addr(&full_bar[stage]), phase);
      if (!A_TMA) fence_async_shared();
    };
    auto convert_next = [&](int64_t q_row, const RowScales& sc) {
      wait_full();
      const unsigned char* packed = smem + stage * S::kStage + kABytes + ctid * kPackedRow;
      convert_row<QB, true>(packed, smem + (converted - base) + cbuf * kBBytes, ctid, q_row >= 0, sc);
      fence_async_shared();
      compute_barrier();
    };
    auto advance = [&] {
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    };
    // C^T = W X^T for a tile of N tokens (bf16 experts): each warpgroup's two 64-row blocks of
    // weight rows (store_transposed's layout, as the register-operand kernel's) as wgmma's A, the
    // tile's tokens as B, from the same stages; every output sums its k-tiles and k-steps in the
    // same order as the 128-row product, so the bits are the same.
    auto narrow_tile = [&](auto tokens, const ExpertTile& et, int n0) {
      constexpr int N = decltype(tokens)::value;
      float d[2][64];
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int i = 0; i < 64; ++i) d[b][i] = 0.0f;
      auto fence_accumulators = [&] {
#pragma unroll
        for (int b = 0; b < 2; ++b)
#pragma unroll
          for (int i = 0; i < N / 2; ++i) fence_operand(d[b][i]);
      };
      int prev_stage = -1;
      for (int kt = 0; kt < k_tiles; ++kt) {
        wait_full();
        const uint32_t sa = base + stage * S::kStage, sb = sa + kABytes;
        fence_accumulators();
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            const int weight_row = FUSE_SILU ? (kBN / 2) * b + 64 * cwg : (kBN / 2) * cwg + 64 * b;
            wgmma_m64nNk16<N>(d[b], swizzled_desc<BK>(sb + weight_row * (BK * 2) + kk * 32),
                              swizzled_desc<BK>(sa + kk * 32));
          }
        wgmma_commit();
        wgmma_wait<1>();
        fence_accumulators();
        if (prev_stage >= 0) release(prev_stage);
        prev_stage = stage;
        advance();
      }
      wgmma_wait<0>();
      fence_accumulators();
      release(prev_stage);
      store_transposed<FUSE_SILU>(g, d, et.row0, et.rows, n0, cwg, warp, lane);
    };
    for (int j = 0;; ++j) {
      const int4 info = take_tile(j, lane);
      if (info.x < 0) break;
      ExpertTile et;
      et.expert = info.x;
      et.row0 = info.y;
      et.rows = info.z;
      const int n0 = info.w;
      const int64_t q_row = QB != kBf16 ? quant_row<FUSE_SILU>(g, qw, et.expert, n0, ctid) : -1;
      const int64_t s_row = scale_row<QB>(qw, q_row);
      if constexpr (QB == kBf16) {
        // An expert's last m-tile, 16 or more rows short of 128: the transposed product, with the
        // tile's tokens as the MMA's N rounded up to 16, rather than 128 rows of which the rest
        // are padding (kimi_k2_3layer's experts have about 341 rows: a third m-tile of 85).
        if (et.rows <= kBM - 16) {
          switch ((et.rows + 15) / 16) {
            case 1: narrow_tile(std::integral_constant<int, 16>{}, et, n0); break;
            case 2: narrow_tile(std::integral_constant<int, 32>{}, et, n0); break;
            case 3: narrow_tile(std::integral_constant<int, 48>{}, et, n0); break;
            case 4: narrow_tile(std::integral_constant<int, 64>{}, et, n0); break;
            case 5: narrow_tile(std::integral_constant<int, 80>{}, et, n0); break;
            case 6: narrow_tile(std::integral_constant<int, 96>{}, et, n0); break;
            default: narrow_tile(std::integral_constant<int, 112>{}, et, n0); break;
          }
          continue;
        }
      }
      RowScales scales_next;
      if (QB != kBf16) {
        convert_next(q_row, fetch_scales<QB>(qw, s_row, 0));
        if (k_tiles > 1) scales_next = fetch_scales<QB>(qw, s_row, 1);
      }
      float d[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.0f;
      int prev_stage = -1;
      for (int kt = 0; kt < k_tiles; ++kt) {
        if (QB == kBf16) wait_full();
        const uint32_t sa = base + stage * S::kStage + cwg * (kBM / 2) * (BK * 2);
        const uint32_t sb = QB == kBf16 ? base + stage * S::kStage + kABytes : converted + cbuf * kBBytes;
#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(d[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk)
          wgmma_m64n256k16(d, swizzled_desc<BK>(sa + kk * 32), swizzled_desc<BK>(sb + kk * 32));
        wgmma_commit();
        wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(d[i]);
        if (prev_stage >= 0) release(prev_stage);
        prev_stage = stage;
        advance();
        if (QB != kBf16) {
          cbuf = (cbuf + 1) % 3;
          if (kt + 1 < k_tiles) {
            convert_next(q_row, scales_next);
            if (kt + 2 < k_tiles) scales_next = fetch_scales<QB>(qw, s_row, kt + 2);
          }
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 128; ++i) fence_operand(d[i]);
      release(prev_stage);
      store_tile<FUSE_SILU>(g, d, et.row0, et.rows, n0, cwg * 64, warp, lane);
    }
  }
#endif
}

// The tensor map of a [rows, inner] matrix of bf16 (boxes of box_inner (64 or 32) x 128, in the
// 128 B or 64 B swizzle: the A and B tiles) or of packed bytes (boxes of box_inner (32: INT4, 64:
// FP8) bytes x 128 rows, in the swizzle of that width, which convert_row undoes), rows pitch_bytes
// apart. Rows past `rows` read as zeros.
CUtensorMap tile_map(const void* data, bool bf16_elements, uint64_t inner, uint64_t rows, uint64_t pitch_bytes,
                     uint32_t box_inner) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult found{};
  E3_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                                 cudaEnableDefault, &found));
  E3_REQUIRE(found == cudaDriverEntryPointSuccess && encode, ErrorKind::Internal,
             "the CUDA driver has no cuTensorMapEncodeTiled (query result {})", static_cast<int>(found));
  CUtensorMap map{};
  const cuuint64_t dims[2] = {inner, rows};
  const cuuint64_t strides[1] = {pitch_bytes};
  const cuuint32_t box[2] = {box_inner, kBN / 2};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult rc =
      encode(&map, bf16_elements ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
             const_cast<void*>(data), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             !bf16_elements    ? (box_inner == 32 ? CU_TENSOR_MAP_SWIZZLE_32B : CU_TENSOR_MAP_SWIZZLE_64B)
             : box_inner == 64 ? CU_TENSOR_MAP_SWIZZLE_128B
                               : CU_TENSOR_MAP_SWIZZLE_64B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  E3_REQUIRE(rc == CUDA_SUCCESS, ErrorKind::Internal,
             "cuTensorMapEncodeTiled failed ({}) for [{}, {}] at {}, pitch {} B, box of {}", static_cast<int>(rc), rows,
             inner, data, pitch_bytes, box_inner);
  return map;
}

template <bool FUSE, int QB, bool A_TMA, int BK, bool W_REGS>
void launch(const GroupedArgs& g, const QuantWeights& qw, const CUtensorMap& b_map, const CUtensorMap& a_map,
            int64_t max_rows, WsSchedule schedule, cudaStream_t s) {
  constexpr size_t smem = Smem<QB, BK, W_REGS>::kBytes;
  auto* kernel = grouped_gemm_ws_kernel<FUSE, QB, A_TMA, BK, W_REGS>;
  E3_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int cols = FUSE ? g.n / 2 : g.n, per_block = FUSE ? kBN / 2 : kBN;
  const int n_tiles = (cols + per_block - 1) / per_block;
  const int64_t max_tiles = ((max_rows + kBM - 1) / kBM + g.experts) * n_tiles;  // one partial m-tile per expert
  int device = 0, sms = 0;
  E3_CUDA_CHECK(cudaGetDevice(&device));
  E3_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(max_tiles, sms)));
  kernel<<<blocks, kThreads, smem, s>>>(b_map, a_map, g, qw, n_tiles, schedule);
  E3_CUDA_LAUNCH_CHECK("grouped_gemm_ws");
}

// The gathered A rows (gate/up) come with cp.async, the expert-grouped ones (down) through the
// copy engine; only the gate/up GEMM fuses the silu.
template <int QB, int BK, bool W_REGS = false>
void launch_any(const GroupedArgs& g, const QuantWeights& qw, const CUtensorMap& b_map, bool fuse_silu,
                int64_t max_rows, WsSchedule schedule, cudaStream_t s) {
  if (!g.a_rows && !fuse_silu) {
    const CUtensorMap a_map = tile_map(g.a, true, static_cast<uint64_t>(g.k), static_cast<uint64_t>(max_rows),
                                       static_cast<uint64_t>(g.lda) * 2, BK);
    return launch<false, QB, true, BK, W_REGS>(g, qw, b_map, a_map, max_rows, schedule, s);
  }
  const CUtensorMap none{};
  if (fuse_silu) launch<true, QB, false, BK, W_REGS>(g, qw, b_map, none, max_rows, schedule, s);
  else launch<false, QB, false, BK, W_REGS>(g, qw, b_map, none, max_rows, schedule, s);
}

}  // namespace

bool grouped_gemm_ws_reads(const GroupedArgs& g) {
  // The copy engine wants 16-byte aligned bases and row pitches, as does cp.async.
  return reinterpret_cast<uintptr_t>(g.w) % 16 == 0 && g.k % 8 == 0 && g.lda % 8 == 0 &&
         reinterpret_cast<uintptr_t>(g.a) % 16 == 0;
}

void grouped_gemm_ws(const GroupedArgs& g, bool fuse_silu, int64_t max_rows, cudaStream_t s, bool short_k,
                     WsSchedule schedule) {
  E3_REQUIRE(grouped_gemm_ws_reads(g), ErrorKind::Internal, "grouped_gemm_ws: unaligned operands");
  E3_REQUIRE(!schedule.counted || g.tile_counter, ErrorKind::Internal, "grouped_gemm_ws: no tile counter");
  const uint64_t k = static_cast<uint64_t>(g.k), rows = static_cast<uint64_t>(g.experts) * g.n;
  if (short_k) return launch_any<kBf16, 32>(g, QuantWeights{}, tile_map(g.w, true, k, rows, k * 2, 32), fuse_silu,
                                           max_rows, schedule, s);
  launch_any<kBf16, kTileK>(g, QuantWeights{}, tile_map(g.w, true, k, rows, k * 2, kTileK), fuse_silu, max_rows,
                            schedule, s);
}

void grouped_gemm_ws_quantized(const GroupedArgs& g, const QuantWeights& qw, bool int4, bool fuse_silu,
                               int64_t max_rows, WsSchedule schedule, cudaStream_t s) {
  E3_REQUIRE(grouped_gemm_ws_reads(g), ErrorKind::Internal, "grouped_gemm_ws_quantized: unaligned operands");
  E3_REQUIRE(!schedule.counted || g.tile_counter, ErrorKind::Internal, "grouped_gemm_ws_quantized: no tile counter");
  const uint32_t box = int4 ? packed_row_bytes<kInt4>() : packed_row_bytes<kFp8>();
  const uint64_t bytes = static_cast<uint64_t>(qw.row_bytes);
  const CUtensorMap b_map = tile_map(qw.q, false, bytes, static_cast<uint64_t>(g.experts) * g.n, bytes, box);
  if (schedule.weights_in_registers) {
    if (int4) launch_any<kInt4, kTileK, true>(g, qw, b_map, fuse_silu, max_rows, schedule, s);
    else launch_any<kFp8, kTileK, true>(g, qw, b_map, fuse_silu, max_rows, schedule, s);
  } else if (int4) {
    launch_any<kInt4, kTileK>(g, qw, b_map, fuse_silu, max_rows, schedule, s);
  } else {
    launch_any<kFp8, kTileK>(g, qw, b_map, fuse_silu, max_rows, schedule, s);
  }
}

}  // namespace e3::kernels::cuda
