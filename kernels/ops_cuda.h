// Host-side launchers of the CUDA kernels (bf16 activations, fp32 accumulation), one file per
// op family, each with its CPU twin in ops_cpu.h. All run on the given stream and never
// synchronise the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "kernels/backend.h"

namespace e3::kernels::cuda {

void embedding(Tensor ids, Tensor table, Tensor out, cudaStream_t s);           // elementwise_cuda.cu
void add_inplace(Tensor acc, Tensor x, cudaStream_t s);                         // elementwise_cuda.cu
void add_bias(Tensor acc, Tensor bias, cudaStream_t s);                         // elementwise_cuda.cu
void silu_mul(Tensor gate, Tensor up, Tensor out, cudaStream_t s);              // elementwise_cuda.cu
void mla_expand_kv(Tensor kv, Tensor k_rot, int heads, int nope_dim, int v_dim, Tensor k, Tensor v,
                   cudaStream_t s);                                             // elementwise_cuda.cu
// Any of F32/BF16/F16 to any, same shape; strides allowed.
void convert(Tensor src, Tensor dst, cudaStream_t s);                           // elementwise_cuda.cu
// Fills `t` with N(0, 1) * scale from a counter-based generator (the benchmark's weights).
void fill_random(Tensor t, uint64_t seed, float scale, cudaStream_t s);         // elementwise_cuda.cu

void dequantize(const QuantStack& w, Tensor out, cudaStream_t s);              // quant_cuda.cu
void fill_random_quant(const QuantStack& w, uint64_t seed, cudaStream_t s);     // quant_cuda.cu
// --dtype fp8 rows: the twin of encode_e4m3_row, bit for bit. src F32/BF16 [rows, H], dst U8 [rows, H + 4].
void encode_e4m3_rows(Tensor src, Tensor dst, cudaStream_t s);                  // quant_cuda.cu

void rmsnorm(Tensor x, Tensor weight, float eps, Tensor out, cudaStream_t s);  // norm_cuda.cu
void add_rmsnorm(Tensor residual, Tensor x, Tensor weight, float eps, Tensor out, Tensor out_f32, cudaStream_t s);
void rmsnorm_heads(Tensor x, int head_dim, Tensor weight, float eps, cudaStream_t s);

void rope(Tensor x, const RopeParams& p, const RopeTable& table, const SequenceLayout& seqs,
          cudaStream_t s);                                                      // rope_cuda.cu

// wgmma: the sm_90a warpgroup-MMA kernel where its head dims fit (attention_wgmma_fits); the
// mma.sync kernel otherwise.
void attention(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p, const SequenceLayout& seqs,
               bool wgmma, cudaStream_t s);                                     // attention_cuda.cu
bool attention_wgmma_fits(const AttentionParams& p);                            // attention_sm90.cu
void attention_wgmma(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p, const SequenceLayout& seqs,
                     cudaStream_t s);                                           // attention_sm90.cu

void moe_route(Tensor logits, const Tensor* correction_bias, const RouterParams& p, Tensor topk_ids,
               Tensor topk_weights, cudaStream_t s);                            // moe_cuda.cu
// Called at the start of each phase of moe_experts (and with null at the end), for profiling.
using MoePhaseHook = std::function<void(const char* phase)>;
// The kernels moe_experts runs, fixed when the backend is created.
struct MoeKernelChoice {
  int gemm_variant = 0;          // resolve_gemm_variant's: 0-3 portable, 4 and 5 the sm_90a wgmma kernels
  bool fuse_silu = true;         // the silu in the gate/up GEMM's epilogue (not E3_MOE_UNFUSED)
  bool experts_in_gemm = false;  // kept-quantized experts converted inside the wgmma GEMM where it
                                 // can (moe_reads_quantized), not dequantized into the scratch first
  // [kL2SideSlots] on the device, by %smid: the L2 side of each SM (find_l2_sides), so that the
  // counted walks (8, 9) take tiles from both ends, one per side; null: one walk from the front.
  const uint8_t* l2_side_of_sm = nullptr;
};
// CudaOptions::gemm_variant on a GPU with (hopper_available) or without the sm_90a grouped GEMM
// (hopper_grouped_gemm_built): auto picks; 4 or 5 where it is missing is a usage error.
int resolve_gemm_variant(int requested, bool hopper_available);  // moe_cuda.cu
void moe_experts(Tensor x, Tensor topk_ids, Tensor topk_weights, const ExpertStack& experts, Tensor out,
                 Tensor shared, Tensor scratch, const MoeKernelChoice& kernels, cudaStream_t s,
                 const MoePhaseHook& hook = {});  // moe_cuda.cu
// fuse_silu as MoeKernelChoice's: the unfused silu needs room for the gate/up GEMM's whole output.
size_t moe_scratch_bytes(int64_t tokens, const MoeScratchShape& shape, bool fuse_silu);  // moe_cuda.cu
// Whether moe_experts reads these kept-quantized experts directly in its GEMMs (Hopper), so
// that its scratch needs no dequantized copy of them.
bool moe_reads_quantized(const ExpertStack& experts, const MoeKernelChoice& kernels);  // moe_cuda.cu
// Whether `device` is sm_90 and this binary carries the sm_90a image of the wgmma grouped
// GEMM (grouped_gemm_sm90.cu). Runs a probe kernel and waits for it: call once, at start-up.
bool hopper_grouped_gemm_built(int device);

// y = x w^T (+ bias) through cuBLASLt (gemm_cuda.cpp). Plans are cached per shape; a cache
// miss costs a host-side heuristic query, never a device allocation or a sync.
class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  // x, w both bf16 or both fp32; y bf16 or fp32 (fp32 for fp32 inputs); bias has y's dtype.
  void linear(Tensor x, Tensor w, const Tensor* bias, Tensor y, cudaStream_t s);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace e3::kernels::cuda
