#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace e3::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0f;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  const float total = shared[0];
  __syncthreads();
  return total;
}

// One block per row. With `add`, residual += x first (rounded to bf16, as a bf16 add is) and
// the normalised value is that of the new residual. As HF: x * rsqrt(mean(x^2) + eps) in
// fp32, rounded to bf16, then times the weight.
template <bool kAdd>
__global__ void rmsnorm_kernel(bf16* residual, int64_t rs, const bf16* x, int64_t xs, const bf16* w, float eps,
                               bf16* out, int64_t os, int64_t cols) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  bf16* res = residual + row * rs;
  float sum_sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = to_f(res[c]);
    if (kAdd) {
      v = round_bf(v + to_f(x[row * xs + c]));
      res[c] = to_bf(v);
    }
    sum_sq += v * v;
  }
  const float inv = rsqrtf(block_sum(sum_sq, shared) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    out[row * os + c] = to_bf(to_f(w[c]) * round_bf(to_f(res[c]) * inv));
}

// One warp per (row, head).
__global__ void rmsnorm_heads_kernel(bf16* x, int64_t xs, int64_t rows, int heads, int head_dim, const bf16* w,
                                     float eps) {
  const int64_t task = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  if (task >= rows * heads) return;
  const int lane = threadIdx.x % 32;
  bf16* p = x + (task / heads) * xs + (task % heads) * head_dim;
  float sum_sq = 0.0f;
  for (int c = lane; c < head_dim; c += 32) sum_sq += to_f(p[c]) * to_f(p[c]);
  for (int o = 16; o > 0; o >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
  const float inv = rsqrtf(sum_sq / static_cast<float>(head_dim) + eps);
  for (int c = lane; c < head_dim; c += 32) p[c] = to_bf(to_f(w[c]) * round_bf(to_f(p[c]) * inv));
}

void check(const Tensor& t, const Tensor& w, const char* what) {
  E3_REQUIRE(t.dtype == DType::BF16 && w.dtype == DType::BF16 && w.numel() == t.cols, ErrorKind::Internal,
             "cuda {}: x {} weight {}", what, t.shape_str(), w.shape_str());
}

}  // namespace

void rmsnorm(Tensor x, Tensor weight, float eps, Tensor out, cudaStream_t s) {
  check(x, weight, "rmsnorm");
  E3_REQUIRE(out.rows == x.rows && out.cols == x.cols, ErrorKind::Internal, "cuda rmsnorm out {}", out.shape_str());
  if (x.rows == 0) return;
  rmsnorm_kernel<false><<<static_cast<unsigned>(x.rows), kThreads, 0, s>>>(
      x.as<bf16>(), x.stride, nullptr, 0, weight.as<bf16>(), eps, out.as<bf16>(), out.stride, x.cols);
  E3_CUDA_LAUNCH_CHECK("rmsnorm");
}

void add_rmsnorm(Tensor residual, Tensor x, Tensor weight, float eps, Tensor out, cudaStream_t s) {
  check(residual, weight, "add_rmsnorm");
  E3_REQUIRE(x.rows == residual.rows && x.cols == residual.cols && out.rows == x.rows && out.cols == x.cols,
             ErrorKind::Internal, "cuda add_rmsnorm x {} out {}", x.shape_str(), out.shape_str());
  if (x.rows == 0) return;
  rmsnorm_kernel<true><<<static_cast<unsigned>(x.rows), kThreads, 0, s>>>(
      residual.as<bf16>(), residual.stride, x.as<bf16>(), x.stride, weight.as<bf16>(), eps, out.as<bf16>(),
      out.stride, x.cols);
  E3_CUDA_LAUNCH_CHECK("add_rmsnorm");
}

void rmsnorm_heads(Tensor x, int head_dim, Tensor weight, float eps, cudaStream_t s) {
  E3_REQUIRE(x.dtype == DType::BF16 && head_dim > 0 && x.cols % head_dim == 0 && weight.numel() == head_dim,
             ErrorKind::Internal, "cuda rmsnorm_heads: x {} head_dim {}", x.shape_str(), head_dim);
  const int heads = static_cast<int>(x.cols / head_dim);
  const int64_t tasks = x.rows * heads;
  if (tasks == 0) return;
  rmsnorm_heads_kernel<<<blocks_for(tasks, kThreads / 32), kThreads, 0, s>>>(x.as<bf16>(), x.stride, x.rows, heads,
                                                                             head_dim, weight.as<bf16>(), eps);
  E3_CUDA_LAUNCH_CHECK("rmsnorm_heads");
}

}  // namespace e3::kernels::cuda
