#include "kernels/cuda_options.h"

#include "core/error.h"

namespace e3::kernels {

CudaOptions cuda_options_from(const Environment& env) {
  CudaOptions o;
  if (const auto v = env.get("E3_GEMM_VARIANT"); v && !v->empty()) {
    E3_REQUIRE(v->size() == 1 && (*v)[0] >= '0' && (*v)[0] <= '0' + CudaOptions::kHopperWsCountedRegsGemmVariant, ErrorKind::Usage,
               "E3_GEMM_VARIANT='{}': expected 0, 1, 2 or 3 (the portable grouped GEMM's tile shapes), 4 (the "
               "Hopper cp.async wgmma kernel), 5 (the warp-specialised Hopper kernel), 6 (the same with 32-column "
               "k-tiles), 7 (5 walking each expert's tiles n-tile major), 8 (7 "
               "with the tiles taken from a counter) or 9 (8 with quantized experts as the MMA's register "
               "operand); unset it for the best kernel of the GPU",
               *v);
    o.gemm_variant = (*v)[0] - '0';
  }
  if (const auto v = env.get("E3_MOE_UNFUSED"); v && !v->empty()) {
    E3_REQUIRE(*v == "0" || *v == "1", ErrorKind::Usage,
               "E3_MOE_UNFUSED='{}': expected 1 (the experts' silu as a kernel of its own) or 0", *v);
    o.moe_unfused = *v == "1";
  }
  if (const auto v = env.get("E3_ATTENTION_VARIANT"); v && !v->empty()) {
    E3_REQUIRE(*v == "0" || *v == "1", ErrorKind::Usage,
               "E3_ATTENTION_VARIANT='{}': expected 0 (the mma.sync attention kernel) or 1 (the Hopper warpgroup-MMA "
               "one); unset it for the best kernel of the GPU",
               *v);
    o.attention_variant = (*v)[0] - '0';
  }
  if (const auto v = env.get("E3_L2_SIDES"); v && !v->empty()) {
    E3_REQUIRE(*v == "0" || *v == "1" || *v == "2", ErrorKind::Usage,
               "E3_L2_SIDES='{}': expected 1 (the expert GEMM's tiles walked from both ends, one per half of L2, as a "
               "probe at start-up finds them), 2 (even and odd SMs as the halves) or 0 (one walk); unset it for the "
               "default",
               *v);
    o.l2_sides = (*v)[0] - '0';
  }
  o.profile = env.get("E3_PROFILE") == "1";
  return o;
}

}  // namespace e3::kernels
