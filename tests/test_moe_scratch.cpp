// The MoE scratch of the CUDA backend: `info` sizes it with the planning backend, the GPU
// carves it with moe_scratch_layout; both must be the one layout, whose pieces hold what the
// kernels write into them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/moe_scratch.h"

namespace {

using e3::kernels::MoeScratchLayout;
using e3::kernels::MoeScratchShape;

struct Shape {
  int64_t tokens;
  MoeScratchShape s;
};

const std::vector<Shape> kShapes{
    {1, {1, 1, 8, 8, false}},
    {300, {4, 8, 128, 96, false}},
    {300, {4, 8, 256, 192, true}},
    {16384, {8, 32, 7168, 2048, true}},   // DeepSeek-V3 over 8 ranks
    {16384, {8, 16, 4096, 1536, false}},  // GLM-4.5-Air-like over 8 ranks
    {7, {6, 2, 2048, 1408, true}},        // top_k above the local experts
};

TEST(MoeScratch, InfosEstimateIsTheGpusLayoutWithTheSameSiluChoice) {
  for (bool unfused : {false, true}) {
    e3::kernels::CudaOptions options;
    options.moe_unfused = unfused;
    const auto planner = e3::kernels::make_planning_backend(e3::DType::BF16, options);
    for (const Shape& c : kShapes) {
      const MoeScratchLayout l = e3::kernels::moe_scratch_layout(c.tokens, c.s.top_k, c.s.local_experts, c.s.hidden,
                                                                 c.s.intermediate, c.s.quantized, unfused);
      EXPECT_EQ(planner->moe_scratch_bytes(c.tokens, c.s), l.bytes)
          << "tokens " << c.tokens << " H " << c.s.hidden << " unfused " << unfused;
    }
  }
}

TEST(MoeScratch, EveryPieceHoldsWhatTheKernelsWrite) {
  for (const Shape& c : kShapes)
    for (bool separate_silu : {false, true}) {
      SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " H " + std::to_string(c.s.hidden) + " separate silu " +
                   std::to_string(separate_silu));
      const MoeScratchLayout l = e3::kernels::moe_scratch_layout(c.tokens, c.s.top_k, c.s.local_experts, c.s.hidden,
                                                                 c.s.intermediate, c.s.quantized, separate_silu);
      const auto T = static_cast<size_t>(c.tokens), H = static_cast<size_t>(c.s.hidden),
                 I = static_cast<size_t>(c.s.intermediate), E = static_cast<size_t>(c.s.local_experts),
                 K = static_cast<size_t>(c.s.top_k);
      const size_t R = T * std::min(K, E);
      const size_t experts = c.s.quantized ? E * H * I : 0;
      // (offset, bytes needed) in carve order: per routed row 3I + H bf16 values, I + H with the silu fused.
      const std::vector<std::pair<size_t, size_t>> pieces{
          {l.gate_up, separate_silu ? R * 2 * I * 2 : 0}, {l.act, R * I * 2}, {l.y, R * H * 2},
          {l.perm_token, R * 4},      {l.perm_weight, R * 4},       {l.pair_row, T * K * 4},
          {l.chunk_counts, (T * K + e3::kernels::kMoeDispatchChunk - 1) / e3::kernels::kMoeDispatchChunk * E * 4},
          {l.row_offsets, (E + 1) * 4}, {l.tile_offsets, (E + 1) * 4}, {l.tile_counters, 16},
          {l.deq_gate_up, experts * 2 * 2}, {l.deq_down, experts * 2}};
      size_t end = 0;
      for (const auto& [offset, bytes] : pieces) {
        EXPECT_EQ(offset % 256, 0u);
        EXPECT_GE(offset, end) << "pieces overlap";
        end = offset + bytes;
      }
      EXPECT_GE(l.bytes, end);
      EXPECT_LT(l.bytes, end + 256) << "more than the alignment beyond the last piece";
    }
}

TEST(MoeScratch, TheFusedSiluLeavesOutTheGateUpOutput) {
  // With the silu in the gate/up GEMM's epilogue nothing holds gate|up: [R, 2I] bf16 less (kimi_k2_3layer's
  // 16,384 tokens: 1 GiB of its 8.8 GiB workspace).
  for (const Shape& c : kShapes) {
    const auto layout = [&](bool separate) {
      return e3::kernels::moe_scratch_layout(c.tokens, c.s.top_k, c.s.local_experts, c.s.hidden, c.s.intermediate,
                                             c.s.quantized, separate);
    };
    const size_t R = static_cast<size_t>(c.tokens) * static_cast<size_t>(std::min(c.s.top_k, c.s.local_experts));
    const size_t gate_up = e3::kernels::moe_scratch_align(R * 2 * static_cast<size_t>(c.s.intermediate) * 2);
    EXPECT_EQ(layout(true).bytes - layout(false).bytes, gate_up) << "tokens " << c.tokens;
  }
}

TEST(MoeScratch, TheCpuPlanIsTheCpuBackendsScratch) {
  const auto planner = e3::kernels::make_planning_backend(e3::DType::F32);
  const auto cpu = e3::kernels::make_cpu_backend(1);
  for (const Shape& c : kShapes) EXPECT_EQ(planner->moe_scratch_bytes(c.tokens, c.s), cpu->moe_scratch_bytes(c.tokens, c.s));
}

}  // namespace
