// Tuning knobs of the CUDA backend's MoE kernels, for comparing kernels on a device, and its
// op profiler. Taken from the start-up environment where the backend is created, so that a
// bad value is a usage error at start and never a throw in the middle of a step.
#pragma once

#include "core/environment.h"

namespace e3::kernels {

struct CudaOptions {
  // E3_GEMM_VARIANT, the kernel behind the grouped expert GEMMs: kAutoGemmVariant (unset) =
  // the warp-specialised Hopper kernel taking tiles from a counter (9) where the sm_90a image is
  // built for the GPU, else the portable one (0); 0 = portable BK 32 x 3 stages, 1 = BK 64 x 3,
  // 2 = BK 32 x 4, 3 = BK 64 x 2;
  // 4 = the Hopper cp.async kernel, 5 = the warp-specialised Hopper kernel, 6 = the same with
  // 32-column k-tiles and 8 stages for bf16 experts, 7 = 5 walking each expert's tiles n-tile
  // major, 8 = 7 with each block taking the next tile from a counter, 9 = 8 with quantized experts
  // as wgmma's register operand rather than converted into shared memory (bf16 experts as 8; 4-9
  // are usage errors where the image or the GPU is not there).
  static constexpr int kAutoGemmVariant = -1, kHopperGemmVariant = 4, kHopperWsGemmVariant = 5,
                       kHopperWsShortKGemmVariant = 6, kHopperWsSlabMajorGemmVariant = 7,
                       kHopperWsCountedGemmVariant = 8, kHopperWsCountedRegsGemmVariant = 9;
  int gemm_variant = kAutoGemmVariant;
  // E3_MOE_UNFUSED=1: the silu of the experts as a kernel of its own after the gate/up GEMM,
  // instead of in that GEMM's epilogue.
  bool moe_unfused = false;
  // E3_PROFILE=1: every op timed with events (Backend::profile_report); any other value is off.
  bool profile = false;
  // E3_ATTENTION_VARIANT, the attention kernel: kAutoAttentionVariant (unset) = the warpgroup-MMA
  // kernel where the sm_90a image is built for the GPU and the head dims fit it, else the
  // mma.sync one; 0 = the mma.sync kernel; 1 = the warpgroup-MMA kernel (a usage error where the
  // image or the GPU is not there).
  static constexpr int kAutoAttentionVariant = -1, kMmaSyncAttention = 0, kWgmmaAttention = 1;
  int attention_variant = kAutoAttentionVariant;
  // E3_L2_SIDES, whether the counted walks (8, 9) take tiles by L2 side (find_l2_sides, where an
  // H100's or H200's L2 is two halves joined by a link): kAutoL2Sides (unset) = off; 0 = off;
  // 1 = on where the start-up probe finds two sides; 2 = even and odd SMs as the two sides,
  // whatever the GPU (the tests: the walk's bits without the probe).
  static constexpr int kAutoL2Sides = -1, kNoL2Sides = 0, kProbedL2Sides = 1, kParityL2Sides = 2;
  int l2_sides = kAutoL2Sides;
};

// Unset or empty variables keep the defaults; any other value than those above is a usage
// error naming the variable.
CudaOptions cuda_options_from(const Environment& env);

}  // namespace e3::kernels
