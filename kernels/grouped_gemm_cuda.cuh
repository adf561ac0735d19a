// The grouped expert GEMM shared by moe_cuda.cu (the portable mma.sync kernel and the
// dispatch) and grouped_gemm_sm90.cu (the Hopper wgmma kernel).
#pragma once

#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace e3::kernels::cuda {

struct GroupedArgs {
  const bf16* a;  // [rows, K]: rows of expert e are [row_offsets[e], row_offsets[e+1]), or with
                  // a_rows, row r is row a_rows[r] of a (the unpermuted tokens, read in place)
  const int32_t* a_rows;
  int64_t lda;
  const bf16* w;  // [experts * N, K]: expert e's rows [e N, (e+1) N)
  bf16* c;        // [rows, N], or [rows, N / 2] with the silu fused
  const int32_t* row_offsets;
  const int32_t* tile_offsets;  // in tiles of the kernel's own row count
  int experts, n, k;
  // Zero at launch: where the warp-specialised kernel's blocks take tiles in turn
  // (WarpSpecializedCounted), the tiles taken from the front (low 32 bits) and from the back
  // (high 32 bits), one atomic word so that the two walks never take the same tile.
  unsigned long long* tile_counter = nullptr;
};

// Which expert's rows a block computes: blockIdx.x walks every (expert, m-tile) pair found on
// the device (tile_offsets counts tiles of tile_rows rows); blocks past the last tile get
// expert -1 and exit.
struct ExpertTile {
  int expert = -1;
  int row0 = 0;  // first row (of the expert-grouped rows) of this tile
  int rows = 0;  // rows in this tile, at most tile_rows
};
__device__ __forceinline__ ExpertTile expert_tile(const GroupedArgs& g, int tile, int tile_rows) {
  ExpertTile t;
  if (tile >= g.tile_offsets[g.experts]) return t;
  int lo = 0, hi = g.experts;  // the expert whose tiles hold `tile`
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (g.tile_offsets[mid] <= tile) lo = mid;
    else hi = mid;
  }
  t.expert = lo;
  t.row0 = g.row_offsets[lo] + (tile - g.tile_offsets[lo]) * tile_rows;
  t.rows = min(tile_rows, g.row_offsets[lo + 1] - t.row0);
  return t;
}

// The experts' weights in their quantized form (a QuantStack), as the kernel reads them.
struct QuantWeights {
  const void* q = nullptr;
  const void* scale = nullptr;
  int64_t rows = 0;           // rows per matrix
  int64_t row_bytes = 0;      // packed bytes per row
  int64_t scale_cols = 0;     // scales per scale row
  int64_t matrix_scales = 0;  // scales per matrix (FP8)
  int64_t group = 32, block_rows = 128, block_cols = 128;
  int group_shift = -1, block_cols_shift = -1;  // log2 of group / block_cols where a power of two, else -1
  bool f32_scale = false;
};

// The two Hopper kernels: cp.async loads in every thread (grouped_gemm_sm90.cu,
// E3_GEMM_VARIANT=4), or a loader warpgroup with the tensor copy engine feeding two computing
// warpgroups over persistent tiles (grouped_gemm_sm90_ws.cu, 5, the default). Same bits.
// WarpSpecializedShortK (6) is the warp-specialised kernel with 32-column k-tiles and 8 stages
// for bf16 experts (quantized ones keep 64 columns); WarpSpecializedSlabMajor (7) the same kernel
// walking each expert's tiles n-tile major; WarpSpecializedCounted (8) the tiles in that order,
// each block taking the next one from tile_counter when its loader is free;
// WarpSpecializedCountedRegs (9) that walk with quantized experts built into wgmma's register
// operand (grouped_gemm_sm90_regs.cuh) rather than converted into shared memory.
enum class HopperGemm {
  CpAsync,
  WarpSpecialized,
  WarpSpecializedShortK,
  WarpSpecializedSlabMajor,
  WarpSpecializedCounted,
  WarpSpecializedCountedRegs
};
// How the warp-specialised kernel's persistent blocks walk the tiles, and where its computing
// warpgroups put converted quantized weights.
struct WsSchedule {
  bool slab_major = false;            // each expert's tiles n-tile major
  bool counted = false;               // from GroupedArgs::tile_counter rather than every gridDim-th
  bool weights_in_registers = false;  // quantized experts as wgmma's A operand (C^T = W X^T)
  // With counted: each SM's L2 side by %smid ([kL2SideSlots], find_l2_sides). Side 0's blocks
  // take tiles from the front, side 1's from the back, so that the m-tiles sharing a weight slab
  // run on one side and the slab crosses the link between the L2 halves once. Null: all from
  // the front.
  const uint8_t* l2_side_of_sm = nullptr;
};
WsSchedule ws_schedule(HopperGemm kernel, const uint8_t* l2_side_of_sm);

// C_e = A_e W_e^T for every expert in one launch on sm_90 (wgmma). With fuse_silu, W_e is
// [gate (N/2 rows); up (N/2 rows)] and C gets silu(gate) * up. tile_offsets must count tiles
// of grouped_gemm_hopper_tile_rows() rows; max_rows bounds the rows over all experts.
void grouped_gemm_hopper(const GroupedArgs& g, bool fuse_silu, int64_t max_rows, cudaStream_t s, HopperGemm kernel,
                         const uint8_t* l2_side_of_sm = nullptr);
int grouped_gemm_hopper_tile_rows();
// The same with W kept quantized (the experts' gate_up or down stack: matrices 2e and 2e + 1
// are expert e's gate and up with the silu fused, else matrix e is its down): each B tile is
// converted to bf16, in shared memory or (WarpSpecializedCountedRegs) into wgmma's register
// operand, to the values dequantize() would give. Only where
// grouped_gemm_hopper_reads says the stack's layout suits it.
bool grouped_gemm_hopper_reads(const QuantStack& w);
void grouped_gemm_hopper_quantized(const GroupedArgs& g, const QuantStack& w, bool fuse_silu, int64_t max_rows,
                                   cudaStream_t s, HopperGemm kernel, const uint8_t* l2_side_of_sm = nullptr);

// The warp-specialised kernel itself (grouped_gemm_sm90_ws.cu), reached through the two above.
bool grouped_gemm_ws_reads(const GroupedArgs& g);
void grouped_gemm_ws(const GroupedArgs& g, bool fuse_silu, int64_t max_rows, cudaStream_t s, bool short_k,
                     WsSchedule schedule);
void grouped_gemm_ws_quantized(const GroupedArgs& g, const QuantWeights& qw, bool int4, bool fuse_silu,
                               int64_t max_rows, WsSchedule schedule, cudaStream_t s);

}  // namespace e3::kernels::cuda
