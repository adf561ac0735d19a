#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace e3::kernels::cuda {
namespace {

// One thread per (token, head, pair); cos/sin come from the fp32 table by position.
__global__ void rope_kernel(bf16* x, int64_t xs, const int32_t* positions, const float* cos_t, const float* sin_t,
                            int64_t table_stride, int64_t tokens, int heads, int head_dim, int rot_offset, int half,
                            bool interleaved) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= tokens * heads * half) return;
  const int pair = static_cast<int>(i % half);
  const int head = static_cast<int>((i / half) % heads);
  const int64_t t = i / (int64_t{half} * heads);
  bf16* h = x + t * xs + int64_t{head} * head_dim + rot_offset;
  const int ia = interleaved ? 2 * pair : pair, ib = interleaved ? 2 * pair + 1 : pair + half;
  const float c = cos_t[positions[t] * table_stride + pair], s = sin_t[positions[t] * table_stride + pair];
  const float a = to_f(h[ia]), b = to_f(h[ib]);
  h[ia] = to_bf(a * c - b * s);
  h[ib] = to_bf(b * c + a * s);
}

}  // namespace

void rope(Tensor x, const RopeParams& p, const RopeTable& table, const SequenceLayout& seqs, cudaStream_t s) {
  const int half = p.rot_dim / 2;
  E3_REQUIRE(x.dtype == DType::BF16 && p.rot_dim % 2 == 0 && p.rot_offset + p.rot_dim <= p.head_dim &&
                 x.cols == int64_t{p.num_heads} * p.head_dim && table.cos.cols == half && x.rows == seqs.num_tokens,
             ErrorKind::Internal, "cuda rope: x {} heads {} head_dim {} rot [{}, +{})", x.shape_str(), p.num_heads,
             p.head_dim, p.rot_offset, p.rot_dim);
  const int64_t n = x.rows * p.num_heads * half;
  if (n == 0) return;
  rope_kernel<<<blocks_for(n, 256), 256, 0, s>>>(x.as<bf16>(), x.stride, seqs.positions.as<int32_t>(),
                                                 table.cos.as<float>(), table.sin.as<float>(), table.cos.stride, x.rows,
                                                 p.num_heads, p.head_dim, p.rot_offset, half, p.interleaved);
  E3_CUDA_LAUNCH_CHECK("rope");
}

}  // namespace e3::kernels::cuda
