// The scratch buffer of the CUDA backend's moe_experts, cut into its pieces. One layout for
// the CUDA code that carves the buffer and for the planning backend that sizes it for `info`,
// so that the estimate is what a GPU allocates (with the default kernels: the silu fused).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace e3::kernels {

// Byte offsets of each piece from the start of the buffer, each 256-byte aligned. R, the
// routed rows, is tokens * min(top_k, local experts): a token reaches a local expert at most
// once. Per routed row: gate|up (2I, only where the silu runs as a kernel of its own),
// silu(gate)*up (I) and the down output (H), in bf16.
struct MoeScratchLayout {
  size_t gate_up = 0, act = 0, y = 0;  // bf16 [R, 2I] (empty with the silu fused), [R, I], [R, H]
  size_t perm_token = 0, perm_weight = 0;  // int32 / fp32 [R]: each routed row's token and weight
  size_t pair_row = 0;                     // int32 [tokens * top_k]: each (token, k) pair's row
  size_t chunk_counts = 0;  // int32 [ceil(tokens * top_k / kMoeDispatchChunk), E]: each chunk's pairs per
                            // expert, then (in place) the chunk's first row for each expert
  size_t row_offsets = 0, tile_offsets = 0;  // int32 [E + 1] each
  size_t tile_counters = 0;  // uint64 [2]: the gate/up and down GEMMs' tile counters (the
                             // warp-specialised GEMM's walks from the front and from the back)
  size_t deq_gate_up = 0, deq_down = 0;  // bf16 [E * 2I, H], [E * H, I] when kept-quantized experts
                                         // are dequantized into the scratch (empty otherwise)
  size_t bytes = 0;                      // the whole buffer
};

// The dispatch's chunk: the pairs one block counts and places.
constexpr int kMoeDispatchChunk = 256;

constexpr size_t moe_scratch_align(size_t n) { return (n + 255) / 256 * 256; }

// separate_silu: the gate/up GEMM writes gate|up for a silu kernel of its own (E3_MOE_UNFUSED);
// with the silu fused into that GEMM's epilogue it writes silu(gate)*up straight into act.
constexpr MoeScratchLayout moe_scratch_layout(int64_t tokens, int top_k, int local_experts, int64_t hidden,
                                              int64_t intermediate, bool dequantized_experts, bool separate_silu) {
  constexpr size_t kBf16 = 2, kInt32 = 4, kFp32 = 4;
  const auto T = static_cast<size_t>(tokens), H = static_cast<size_t>(hidden),
             I = static_cast<size_t>(intermediate), E = static_cast<size_t>(local_experts),
             K = static_cast<size_t>(top_k);
  const size_t R = T * static_cast<size_t>(std::min(top_k, local_experts));
  const size_t expert_elems = dequantized_experts ? E * H * I : 0;
  MoeScratchLayout l;
  size_t off = 0;
  const auto take = [&off](size_t bytes) {
    const size_t at = off;
    off += moe_scratch_align(bytes);
    return at;
  };
  l.gate_up = take(separate_silu ? R * 2 * I * kBf16 : 0);
  l.act = take(R * I * kBf16);
  l.y = take(R * H * kBf16);
  l.perm_token = take(R * kInt32);
  l.perm_weight = take(R * kFp32);
  l.pair_row = take(T * K * kInt32);
  const size_t chunks = (T * K + kMoeDispatchChunk - 1) / kMoeDispatchChunk;
  l.chunk_counts = take(chunks * E * kInt32);
  l.row_offsets = take((E + 1) * kInt32);
  l.tile_offsets = take((E + 1) * kInt32);
  l.tile_counters = take(2 * sizeof(uint64_t));
  l.deq_gate_up = take(expert_elems * 2 * kBf16);
  l.deq_down = take(expert_elems * kBf16);
  l.bytes = off;
  return l;
}

}  // namespace e3::kernels
