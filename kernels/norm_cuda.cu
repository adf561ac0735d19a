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

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const bf16* p, int64_t i) { return to_f(p[i]); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(bf16* p, int64_t i, float v) { p[i] = to_bf(v); }

// One block per row: out = w * x * rsqrt(mean(x^2) + eps), computed in fp32, rounded once.
template <typename In, typename Out>
__global__ void rmsnorm_kernel(const In* x, int64_t xs, const bf16* w, float eps, Out* out, int64_t os, int64_t cols) {
  __shared__ float shared[32];
  const In* row = x + blockIdx.x * xs;
  float sum_sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum_sq += load(row, c) * load(row, c);
  const float inv = rsqrtf(block_sum(sum_sq, shared) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    store(out, blockIdx.x * os + c, to_f(w[c]) * (load(row, c) * inv));
}

// residual (fp32) += x (fp32), then the normalised residual into out (bf16) and, if given,
// into out32 (fp32).
__global__ void add_rmsnorm_kernel(float* residual, int64_t rs, const float* x, int64_t xs, const bf16* w, float eps,
                                   bf16* out, int64_t os, float* out32, int64_t o32s, int64_t cols) {
  __shared__ float shared[32];
  float* res = residual + blockIdx.x * rs;
  const float* add = x + blockIdx.x * xs;
  float sum_sq = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = res[c] + add[c];
    res[c] = v;
    sum_sq += v * v;
  }
  const float inv = rsqrtf(block_sum(sum_sq, shared) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float y = to_f(w[c]) * (res[c] * inv);
    out[blockIdx.x * os + c] = to_bf(y);
    if (out32) out32[blockIdx.x * o32s + c] = y;
  }
}

// The same with 16-byte accesses and the row held in registers between the sum and the
// scaling (rows of at most kVecRowMax columns, a multiple of 4, 16-byte aligned): the scalar
// kernel above ran at about two thirds of the memory's bandwidth, and a step runs this one twice
// per layer over the whole batch.
constexpr int kVecPerThread = 8;
constexpr int64_t kVecRowMax = int64_t{kThreads} * 4 * kVecPerThread;
__global__ void add_rmsnorm_vec_kernel(float* residual, int64_t rs, const float* x, int64_t xs, const bf16* w,
                                       float eps, bf16* out, int64_t os, float* out32, int64_t o32s, int cols) {
  __shared__ float shared[32];
  float4* res = reinterpret_cast<float4*>(residual + blockIdx.x * rs);
  const float4* add = reinterpret_cast<const float4*>(x + blockIdx.x * xs);
  const int quads = cols / 4;
  float4 v[kVecPerThread];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecPerThread; ++k) {
    const int q = threadIdx.x + k * kThreads;
    if (q < quads) {
      const float4 a = res[q], b = add[q];
      v[k] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
      res[q] = v[k];
      sum_sq += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
    }
  }
  const float inv = rsqrtf(block_sum(sum_sq, shared) / static_cast<float>(cols) + eps);
#pragma unroll
  for (int k = 0; k < kVecPerThread; ++k) {
    const int q = threadIdx.x + k * kThreads;
    if (q < quads) {
      const uint2 wq = reinterpret_cast<const uint2*>(w)[q];
      const float4 y = make_float4(bf16_lo(wq.x) * (v[k].x * inv), bf16_hi(wq.x) * (v[k].y * inv),
                                   bf16_lo(wq.y) * (v[k].z * inv), bf16_hi(wq.y) * (v[k].w * inv));
      reinterpret_cast<uint2*>(out + blockIdx.x * os)[q] = make_uint2(pack_bf16(y.x, y.y), pack_bf16(y.z, y.w));
      if (out32) reinterpret_cast<float4*>(out32 + blockIdx.x * o32s)[q] = y;
    }
  }
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
  for (int c = lane; c < head_dim; c += 32) p[c] = to_bf(to_f(w[c]) * (to_f(p[c]) * inv));
}

template <typename In>
void launch_rmsnorm(Tensor x, Tensor w, float eps, Tensor out, cudaStream_t s) {
  const auto blocks = static_cast<unsigned>(x.rows);
  if (out.dtype == DType::F32)
    rmsnorm_kernel<In, float><<<blocks, kThreads, 0, s>>>(x.as<In>(), x.stride, w.as<bf16>(), eps, out.as<float>(),
                                                          out.stride, x.cols);
  else
    rmsnorm_kernel<In, bf16><<<blocks, kThreads, 0, s>>>(x.as<In>(), x.stride, w.as<bf16>(), eps, out.as<bf16>(),
                                                         out.stride, x.cols);
}

}  // namespace

void rmsnorm(Tensor x, Tensor weight, float eps, Tensor out, cudaStream_t s) {
  E3_REQUIRE((x.dtype == DType::BF16 || x.dtype == DType::F32) && (out.dtype == DType::BF16 || out.dtype == DType::F32) &&
                 weight.dtype == DType::BF16 && weight.numel() == x.cols && out.rows == x.rows && out.cols == x.cols,
             ErrorKind::Internal, "cuda rmsnorm: x {} weight {} out {}", x.shape_str(), weight.shape_str(),
             out.shape_str());
  if (x.rows == 0) return;
  if (x.dtype == DType::F32)
    launch_rmsnorm<float>(x, weight, eps, out, s);
  else
    launch_rmsnorm<bf16>(x, weight, eps, out, s);
  E3_CUDA_LAUNCH_CHECK("rmsnorm");
}

void add_rmsnorm(Tensor residual, Tensor x, Tensor weight, float eps, Tensor out, Tensor out_f32, cudaStream_t s) {
  E3_REQUIRE(residual.dtype == DType::F32 && x.dtype == DType::F32 && out.dtype == DType::BF16 &&
                 weight.dtype == DType::BF16 && weight.numel() == x.cols && x.rows == residual.rows &&
                 x.cols == residual.cols && out.rows == x.rows && out.cols == x.cols &&
                 (!out_f32.data || (out_f32.dtype == DType::F32 && out_f32.rows == x.rows && out_f32.cols == x.cols)),
             ErrorKind::Internal, "cuda add_rmsnorm: residual {} x {} out {}", residual.shape_str(), x.shape_str(),
             out.shape_str());
  if (x.rows == 0) return;
  if (x.cols <= kVecRowMax && aligned_by(residual, 4) && aligned_by(x, 4) && aligned_by(out, 4) &&
      (!out_f32.data || aligned_by(out_f32, 4)) && reinterpret_cast<uintptr_t>(weight.data) % 8 == 0) {
    add_rmsnorm_vec_kernel<<<static_cast<unsigned>(x.rows), kThreads, 0, s>>>(
        residual.as<float>(), residual.stride, x.as<float>(), x.stride, weight.as<bf16>(), eps, out.as<bf16>(),
        out.stride, out_f32.data ? out_f32.as<float>() : nullptr, out_f32.stride, static_cast<int>(x.cols));
    E3_CUDA_LAUNCH_CHECK("add_rmsnorm");
    return;
  }
  add_rmsnorm_kernel<<<static_cast<unsigned>(x.rows), kThreads, 0, s>>>(
      residual.as<float>(), residual.stride, x.as<float>(), x.stride, weight.as<bf16>(), eps, out.as<bf16>(),
      out.stride, out_f32.data ? out_f32.as<float>() : nullptr, out_f32.stride, x.cols);
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
