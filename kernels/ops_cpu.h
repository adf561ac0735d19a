// The CPU implementations of every op: fp32, straightforward, and the reference that the
// CUDA kernels are tested against. Tensors are host memory, fp32 unless stated.
#pragma once

#include <vector>

#include "kernels/backend.h"

namespace e3::kernels::cpu {

void embedding(Tensor ids, Tensor table, Tensor out);                    // elementwise_cpu.cpp
void copy(Tensor src, Tensor dst);                                       // elementwise_cpu.cpp
void fill_random(Tensor t, uint64_t seed, float scale);                  // elementwise_cpu.cpp
void add_inplace(Tensor acc, Tensor x);                                  // elementwise_cpu.cpp
void add_bias(Tensor acc, Tensor bias);                                  // elementwise_cpu.cpp
void silu_mul(Tensor gate, Tensor up, Tensor out);                       // elementwise_cpu.cpp
void linear(Tensor x, Tensor w, const Tensor* bias, Tensor y);           // gemm_cpu.cpp
void rmsnorm(Tensor x, Tensor weight, float eps, Tensor out);            // norm_cpu.cpp
void add_rmsnorm(Tensor residual, Tensor x, Tensor weight, float eps, Tensor out, Tensor out_f32);  // norm_cpu.cpp
void rmsnorm_heads(Tensor x, int head_dim, Tensor weight, float eps);    // norm_cpu.cpp
void rope(Tensor x, const RopeParams& p, const RopeTable& table, const SequenceLayout& seqs);  // rope_cpu.cpp
// `scratch` holds per-thread score rows; it grows on first use only.
void attention(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p,
               const SequenceLayout& seqs, std::vector<float>& scratch);  // attention_cpu.cpp

void moe_route(Tensor logits, const Tensor* correction_bias, const RouterParams& p, Tensor topk_ids,
               Tensor topk_weights);                                     // moe_cpu.cpp
// `scratch` (bytes, moe_scratch_bytes) holds gathered rows and expert activations.
void moe_experts(Tensor x, Tensor topk_ids, Tensor topk_weights, const ExpertStack& experts, Tensor out,
                 Tensor shared, Tensor scratch);                         // moe_cpu.cpp
size_t moe_scratch_bytes(int64_t tokens, const MoeScratchShape& shape);  // moe_cpu.cpp
void mla_expand_kv(Tensor kv, Tensor k_rot, int heads, int nope_dim, int v_dim, Tensor k, Tensor v);  // attention_cpu.cpp

// Shape checks shared by the implementations.
void require_f32(const Tensor& t, const char* what);
void require_same_shape(const Tensor& a, const Tensor& b, const char* what);

}  // namespace e3::kernels::cpu
