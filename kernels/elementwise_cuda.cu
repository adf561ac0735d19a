#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda_common.cuh"
#include "core/hash.h"
#include "kernels/ops_cuda.h"

namespace e3::kernels::cuda {
namespace {

constexpr int kThreads = 256;

void require(bool ok, const char* what, const Tensor& a) {
  E3_REQUIRE(ok, ErrorKind::Internal, "{}: unsupported tensor {}", what, a.shape_str());
}

__device__ __forceinline__ float ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16* p, int64_t i) { return to_f(p[i]); }
__device__ __forceinline__ void st(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16* p, int64_t i, float v) { p[i] = to_bf(v); }

template <typename Out>
__global__ void embedding_kernel(const int32_t* ids, const bf16* table, int64_t table_stride, Out* out,
                                 int64_t out_stride, int64_t cols) {
  const int64_t row = blockIdx.x;
  const bf16* src = table + ids[row] * table_stride;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) st(out, row * out_stride + c, to_f(src[c]));
}

// Elementwise kernels walk rows (grid.y) and columns (grid.x, threads): no index division.
#define E3_FOR_EACH_ELEMENT(rows, cols)                                                         \
  for (int64_t r = blockIdx.y; r < (rows); r += gridDim.y)                                      \
    for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < (cols); c += int64_t{gridDim.x} * blockDim.x)

template <typename Acc, typename X>
__global__ void add_kernel(Acc* acc, int64_t acc_stride, const X* x, int64_t x_stride, int64_t rows, int64_t cols) {
  E3_FOR_EACH_ELEMENT(rows, cols) {
    const int64_t i = r * acc_stride + c;
    st(acc, i, ld(acc, i) + ld(x, r * x_stride + c));
  }
}

template <typename Acc>
__global__ void add_bias_kernel(Acc* acc, int64_t acc_stride, const Acc* bias, int64_t rows, int64_t cols) {
  E3_FOR_EACH_ELEMENT(rows, cols) {
    const int64_t i = r * acc_stride + c;
    st(acc, i, ld(acc, i) + ld(bias, c));
  }
}

// As PyTorch in bf16: silu(gate) is rounded to bf16, then multiplied by up and rounded.
__global__ void silu_mul_kernel(const bf16* gate, int64_t gs, const bf16* up, int64_t us, bf16* out, int64_t os,
                                int64_t rows, int64_t cols) {
  E3_FOR_EACH_ELEMENT(rows, cols) {
    const float g = to_f(gate[r * gs + c]);
    const float s = silu_bf(g);
    out[r * os + c] = to_bf(s * to_f(up[r * us + c]));
  }
}

// The same eight columns per thread, 16-byte loads and stores (every pointer 16-byte aligned,
// columns and strides multiples of 8).
__global__ void silu_mul_vec8_kernel(const bf16* gate, int64_t gs, const bf16* up, int64_t us, bf16* out, int64_t os,
                                     int64_t rows, int64_t cols8) {
  E3_FOR_EACH_ELEMENT(rows, cols8) {
    const uint4 g8 = *reinterpret_cast<const uint4*>(gate + r * gs + 8 * c);
    const uint4 u8 = *reinterpret_cast<const uint4*>(up + r * us + 8 * c);
    const uint32_t gw[4] = {g8.x, g8.y, g8.z, g8.w}, uw[4] = {u8.x, u8.y, u8.z, u8.w};
    uint32_t ow[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&gw[q]));
      const float2 u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&uw[q]));
      const float s0 = silu_bf(g.x), s1 = silu_bf(g.y);
      ow[q] = pack_bf16(s0 * u.x, s1 * u.y);
    }
    *reinterpret_cast<uint4*>(out + r * os + 8 * c) = make_uint4(ow[0], ow[1], ow[2], ow[3]);
  }
}

// fp32 acc += fp32 x, four columns per thread (16-byte aligned, columns and strides multiples of 4).
__global__ void add_f32_vec4_kernel(float* acc, int64_t acc_stride, const float* x, int64_t x_stride, int64_t rows,
                                    int64_t cols4) {
  E3_FOR_EACH_ELEMENT(rows, cols4) {
    float4* a = reinterpret_cast<float4*>(acc + r * acc_stride + 4 * c);
    const float4 v = *reinterpret_cast<const float4*>(x + r * x_stride + 4 * c);
    float4 o = *a;
    o.x += v.x;
    o.y += v.y;
    o.z += v.z;
    o.w += v.w;
    *a = o;
  }
}

__global__ void mla_expand_kernel(const bf16* kv, int64_t kv_stride, const bf16* k_rot, int64_t rot_stride, bf16* k,
                                  int64_t k_stride, bf16* v, int64_t v_stride, int heads, int nope, int vd, int rope) {
  const int64_t t = blockIdx.x;
  const int qk = nope + rope, per_head = nope + vd;
  for (int i = threadIdx.x; i < heads * (qk + vd); i += blockDim.x) {
    const int h = i / (qk + vd), j = i % (qk + vd);
    if (j < nope)
      k[t * k_stride + h * qk + j] = kv[t * kv_stride + h * per_head + j];
    else if (j < qk)
      k[t * k_stride + h * qk + j] = k_rot[t * rot_stride + (j - nope)];
    else
      v[t * v_stride + h * vd + (j - qk)] = kv[t * kv_stride + h * per_head + nope + (j - qk)];
  }
}

template <typename T>
__device__ float load_as_float(const void* p, int64_t i);
template <>
__device__ float load_as_float<float>(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
template <>
__device__ float load_as_float<bf16>(const void* p, int64_t i) { return to_f(static_cast<const bf16*>(p)[i]); }
template <>
__device__ float load_as_float<__half>(const void* p, int64_t i) { return __half2float(static_cast<const __half*>(p)[i]); }

template <typename T>
__device__ void store_float(void* p, int64_t i, float v);
template <>
__device__ void store_float<float>(void* p, int64_t i, float v) { static_cast<float*>(p)[i] = v; }
template <>
__device__ void store_float<bf16>(void* p, int64_t i, float v) { static_cast<bf16*>(p)[i] = to_bf(v); }
template <>
__device__ void store_float<__half>(void* p, int64_t i, float v) { static_cast<__half*>(p)[i] = __float2half_rn(v); }

// The same in 16-byte pieces (eight values), where every width, stride and base allows it.
__global__ void mla_expand_vec8_kernel(const bf16* kv, int64_t kv_stride, const bf16* k_rot, int64_t rot_stride, bf16* k,
                                       int64_t k_stride, bf16* v, int64_t v_stride, int heads, int nope, int vd,
                                       int rope) {
  const int64_t t = blockIdx.x;
  const int qk = nope + rope, per_head = nope + vd;
  for (int i = threadIdx.x * 8; i < heads * (qk + vd); i += blockDim.x * 8) {
    const int h = i / (qk + vd), j = i % (qk + vd);
    const bf16* src = j < nope ? kv + t * kv_stride + h * per_head + j
                      : j < qk ? k_rot + t * rot_stride + (j - nope)
                               : kv + t * kv_stride + h * per_head + nope + (j - qk);
    bf16* dst = j < qk ? k + t * k_stride + h * qk + j : v + t * v_stride + h * vd + (j - qk);
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  }
}

template <typename S, typename D>
__global__ void convert_kernel(const void* src, int64_t ss, void* dst, int64_t ds, int64_t rows, int64_t cols) {
  E3_FOR_EACH_ELEMENT(rows, cols) store_float<D>(dst, r * ds + c, load_as_float<S>(src, r * ss + c));
}

template <typename S>
void convert_from(Tensor src, Tensor dst, dim3 blocks, cudaStream_t s) {
  switch (dst.dtype) {
    case DType::F32: convert_kernel<S, float><<<blocks, kThreads, 0, s>>>(src.data, src.stride, dst.data, dst.stride, src.rows, src.cols); break;
    case DType::BF16: convert_kernel<S, bf16><<<blocks, kThreads, 0, s>>>(src.data, src.stride, dst.data, dst.stride, src.rows, src.cols); break;
    case DType::F16: convert_kernel<S, __half><<<blocks, kThreads, 0, s>>>(src.data, src.stride, dst.data, dst.stride, src.rows, src.cols); break;
    default: E3_THROW(ErrorKind::Internal, "convert to {}", dtype_name(dst.dtype));
  }
}

__global__ void fill_random_kernel(bf16* p, int64_t stride, int64_t rows, int64_t cols, uint64_t seed, float scale) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t h = splitmix64(seed * 0x100000001b3ull + static_cast<uint64_t>(i));  // stateless
    // Box-Muller from two 24-bit uniforms.
    const float u1 = (static_cast<float>(h >> 40) + 0.5f) / 16777216.0f;
    const float u2 = static_cast<float>((h >> 16) & 0xffffff) / 16777216.0f;
    const float z = sqrtf(-2.0f * __logf(u1)) * __cosf(6.2831853f * u2);
    p[(i / cols) * stride + i % cols] = to_bf(z * scale);
  }
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>(blocks_for(n, kThreads), 65535 * 8)); }

dim3 grid_2d(const Tensor& t) {
  return dim3(std::min<unsigned>(blocks_for(t.cols, kThreads), 64u), static_cast<unsigned>(std::min<int64_t>(t.rows, 65535)));
}

}  // namespace

void embedding(Tensor ids, Tensor table, Tensor out, cudaStream_t s) {
  require(table.dtype == DType::BF16 && (out.dtype == DType::BF16 || out.dtype == DType::F32) &&
              ids.dtype == DType::I32 && ids.numel() == out.rows && table.cols == out.cols,
          "cuda embedding", out);
  if (out.rows == 0) return;
  const auto blocks = static_cast<unsigned>(out.rows);
  if (out.dtype == DType::F32)
    embedding_kernel<<<blocks, 128, 0, s>>>(ids.as<int32_t>(), table.as<bf16>(), table.stride, out.as<float>(),
                                            out.stride, out.cols);
  else
    embedding_kernel<<<blocks, 128, 0, s>>>(ids.as<int32_t>(), table.as<bf16>(), table.stride, out.as<bf16>(),
                                            out.stride, out.cols);
  E3_CUDA_LAUNCH_CHECK("embedding");
}

void add_inplace(Tensor acc, Tensor x, cudaStream_t s) {
  require((acc.dtype == DType::BF16 || acc.dtype == DType::F32) && (x.dtype == DType::BF16 || x.dtype == DType::F32) &&
              acc.rows == x.rows && acc.cols == x.cols,
          "cuda add", acc);
  if (acc.numel() == 0) return;
  const dim3 g = grid_2d(acc);
  if (acc.dtype == DType::F32 && x.dtype == DType::F32 && aligned_by(acc, 4) && aligned_by(x, 4)) {
    const Tensor quarter{acc.data, acc.dtype, acc.rows, acc.cols / 4, acc.stride};
    add_f32_vec4_kernel<<<grid_2d(quarter), kThreads, 0, s>>>(acc.as<float>(), acc.stride, x.as<float>(), x.stride,
                                                              acc.rows, acc.cols / 4);
  } else if (acc.dtype == DType::F32 && x.dtype == DType::F32)
    add_kernel<<<g, kThreads, 0, s>>>(acc.as<float>(), acc.stride, x.as<float>(), x.stride, acc.rows, acc.cols);
  else if (acc.dtype == DType::F32)
    add_kernel<<<g, kThreads, 0, s>>>(acc.as<float>(), acc.stride, x.as<bf16>(), x.stride, acc.rows, acc.cols);
  else if (x.dtype == DType::F32)
    add_kernel<<<g, kThreads, 0, s>>>(acc.as<bf16>(), acc.stride, x.as<float>(), x.stride, acc.rows, acc.cols);
  else
    add_kernel<<<g, kThreads, 0, s>>>(acc.as<bf16>(), acc.stride, x.as<bf16>(), x.stride, acc.rows, acc.cols);
  E3_CUDA_LAUNCH_CHECK("add");
}

void add_bias(Tensor acc, Tensor bias, cudaStream_t s) {
  require((acc.dtype == DType::BF16 || acc.dtype == DType::F32) && bias.dtype == acc.dtype &&
              bias.numel() == acc.cols,
          "cuda add_bias", acc);
  if (acc.numel() == 0) return;
  if (acc.dtype == DType::F32)
    add_bias_kernel<<<grid_2d(acc), kThreads, 0, s>>>(acc.as<float>(), acc.stride, bias.as<float>(), acc.rows, acc.cols);
  else
    add_bias_kernel<<<grid_2d(acc), kThreads, 0, s>>>(acc.as<bf16>(), acc.stride, bias.as<bf16>(), acc.rows, acc.cols);
  E3_CUDA_LAUNCH_CHECK("add_bias");
}

void silu_mul(Tensor gate, Tensor up, Tensor out, cudaStream_t s) {
  require(gate.dtype == DType::BF16 && up.dtype == DType::BF16 && out.dtype == DType::BF16 && gate.rows == up.rows &&
              gate.cols == up.cols && out.rows == gate.rows && out.cols == gate.cols,
          "cuda silu_mul", gate);
  if (out.numel() == 0) return;
  if (aligned_by(gate, 8) && aligned_by(up, 8) && aligned_by(out, 8)) {
    const Tensor eighth{out.data, out.dtype, out.rows, out.cols / 8, out.stride};
    silu_mul_vec8_kernel<<<grid_2d(eighth), kThreads, 0, s>>>(gate.as<bf16>(), gate.stride, up.as<bf16>(), up.stride,
                                                              out.as<bf16>(), out.stride, out.rows, out.cols / 8);
    E3_CUDA_LAUNCH_CHECK("silu_mul");
    return;
  }
  silu_mul_kernel<<<grid_2d(out), kThreads, 0, s>>>(gate.as<bf16>(), gate.stride, up.as<bf16>(), up.stride,
                                                             out.as<bf16>(), out.stride, out.rows, out.cols);
  E3_CUDA_LAUNCH_CHECK("silu_mul");
}

void mla_expand_kv(Tensor kv, Tensor k_rot, int heads, int nope_dim, int v_dim, Tensor k, Tensor v, cudaStream_t s) {
  const int rope = static_cast<int>(k_rot.cols);
  require(kv.dtype == DType::BF16 && kv.cols == int64_t{heads} * (nope_dim + v_dim) &&
              k.cols == int64_t{heads} * (nope_dim + rope) && v.cols == int64_t{heads} * v_dim && k.rows == kv.rows &&
              v.rows == kv.rows && k_rot.rows == kv.rows,
          "cuda mla_expand_kv", kv);
  if (kv.rows == 0) return;
  if (aligned_by(kv, 8) && aligned_by(k_rot, 8) && aligned_by(k, 8) && aligned_by(v, 8) && nope_dim % 8 == 0 &&
      v_dim % 8 == 0) {
    mla_expand_vec8_kernel<<<static_cast<unsigned>(kv.rows), 256, 0, s>>>(kv.as<bf16>(), kv.stride, k_rot.as<bf16>(),
                                                                          k_rot.stride, k.as<bf16>(), k.stride,
                                                                          v.as<bf16>(), v.stride, heads, nope_dim,
                                                                          v_dim, rope);
    E3_CUDA_LAUNCH_CHECK("mla_expand_kv");
    return;
  }
  mla_expand_kernel<<<static_cast<unsigned>(kv.rows), 256, 0, s>>>(kv.as<bf16>(), kv.stride, k_rot.as<bf16>(),
                                                                   k_rot.stride, k.as<bf16>(), k.stride, v.as<bf16>(),
                                                                   v.stride, heads, nope_dim, v_dim, rope);
  E3_CUDA_LAUNCH_CHECK("mla_expand_kv");
}

void convert(Tensor src, Tensor dst, cudaStream_t s) {
  require(src.rows == dst.rows && src.cols == dst.cols, "cuda convert", src);
  if (src.numel() == 0) return;
  const dim3 blocks = grid_2d(src);
  switch (src.dtype) {
    case DType::F32: convert_from<float>(src, dst, blocks, s); break;
    case DType::BF16: convert_from<bf16>(src, dst, blocks, s); break;
    case DType::F16: convert_from<__half>(src, dst, blocks, s); break;
    default: E3_THROW(ErrorKind::Internal, "convert from {}", dtype_name(src.dtype));
  }
  E3_CUDA_LAUNCH_CHECK("convert");
}

void fill_random(Tensor t, uint64_t seed, float scale, cudaStream_t s) {
  require(t.dtype == DType::BF16, "cuda fill_random", t);
  if (t.numel() == 0) return;
  fill_random_kernel<<<grid_for(t.numel()), kThreads, 0, s>>>(t.as<bf16>(), t.stride, t.rows, t.cols, seed, scale);
  E3_CUDA_LAUNCH_CHECK("fill_random");
}

}  // namespace e3::kernels::cuda
