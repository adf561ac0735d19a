// Dequantization on the GPU, the twin of quant_cpu.cpp: bf16(q * scale) with the product in
// fp32, for experts kept quantized in device memory. Memory-bound: each thread turns one
// packed int4 word (8 values) or one fp8 byte into bf16.
#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace e3::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float scale_at(const void* scale, int64_t i, bool f32) {
  return f32 ? static_cast<const float*>(scale)[i] : to_f(static_cast<const bf16*>(scale)[i]);
}

struct Dims {
  int64_t count, rows, cols, block_rows, block_cols, group, scale_rows, scale_cols, row_offset, col_offset;
  size_t matrix_scale_elems;
  bool f32_scale;
};

// One block per output row; each thread turns 8 consecutive values (one packed int4 word, or
// 8 fp8 bytes) into one 16-byte store. Needs cols % 8 == 0, and the block and group widths
// multiples of 8 so that the 8 values share a scale (checked by the launcher).
__global__ void dequant_fp8_rows(const uint8_t* q, const void* scale, Dims d, bf16* out, int64_t ld) {
  const int64_t row = blockIdx.x, m = row / d.rows, r = row - m * d.rows;
  const uint2* src = reinterpret_cast<const uint2*>(q + row * d.cols);
  const int64_t srow = static_cast<int64_t>(m * d.matrix_scale_elems) + ((d.row_offset + r) / d.block_rows) * d.scale_cols;
  uint4* dst = reinterpret_cast<uint4*>(out + row * ld);
  for (int64_t c8 = threadIdx.x; c8 < d.cols / 8; c8 += blockDim.x) {
    const uint2 bytes = src[c8];
    const float sc = scale_at(scale, srow + (d.col_offset + c8 * 8) / d.block_cols, d.f32_scale);
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = j < 2 ? bytes.x : bytes.y;
      const int shift = 16 * (j % 2);
      const float lo = __fmul_rn(e4m3fn_to_float(static_cast<uint8_t>(word >> shift)), sc);
      const float hi = __fmul_rn(e4m3fn_to_float(static_cast<uint8_t>(word >> (shift + 8))), sc);
      packed[j] = pack_bf16(lo, hi);
    }
    dst[c8] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

__global__ void dequant_int4_rows(const uint32_t* q, const bf16* scale, Dims d, bf16* out, int64_t ld) {
  const int64_t row = blockIdx.x, words = d.cols / 8;
  const uint32_t* src = q + row * words;
  const bf16* srow = scale + row * d.scale_cols;
  uint4* dst = reinterpret_cast<uint4*>(out + row * ld);
  for (int64_t w = threadIdx.x; w < words; w += blockDim.x) {
    const uint32_t word = src[w];
    const float sc = to_f(srow[(w * 8) / d.group]);
    uint32_t packed[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float lo = static_cast<float>(static_cast<int>((word >> (8 * j)) & 0xFu) - 8);
      const float hi = static_cast<float>(static_cast<int>((word >> (8 * j + 4)) & 0xFu) - 8);
      packed[j] = pack_bf16(__fmul_rn(lo, sc), __fmul_rn(hi, sc));
    }
    dst[w] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
}

// Any shape: one thread per value.
__global__ void dequant_fp8_kernel(const uint8_t* q, const void* scale, Dims d, bf16* out, int64_t ld) {
  const int64_t n = d.count * d.rows * d.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / d.cols, c = i % d.cols, m = row / d.rows, r = row % d.rows;
    const int64_t si = static_cast<int64_t>(m * d.matrix_scale_elems) + ((d.row_offset + r) / d.block_rows) * d.scale_cols +
                       (d.col_offset + c) / d.block_cols;
    out[row * ld + c] = to_bf(__fmul_rn(e4m3fn_to_float(q[i]), scale_at(scale, si, d.f32_scale)));
  }
}

__global__ void dequant_int4_kernel(const uint32_t* packed, const bf16* scale, Dims d, bf16* out, int64_t ld) {
  const int64_t words = (d.cols + 7) / 8, n = d.count * d.rows * words;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / words, w = i % words;
    const uint32_t word = packed[i];
    const bf16* srow = scale + row * d.scale_cols;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t c = w * 8 + j;
      if (c >= d.cols) break;
      const float v = static_cast<float>(static_cast<int>((word >> (4 * j)) & 0xFu) - 8);
      out[row * ld + c] = to_bf(__fmul_rn(v, to_f(srow[c / d.group])));
    }
  }
}

// The same values as fill_random_quant_host.
__global__ void random_quant_kernel(uint8_t* q, size_t q_bytes, bool fp8, void* scale, size_t scales, bool f32_scale,
                                    float base, uint64_t seed) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < q_bytes; i += stride)
    q[i] = random_quant_byte(fp8, seed, i);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < scales; i += stride) {
    const float v = random_quant_scale_value(base, seed, i);
    if (f32_scale) static_cast<float*>(scale)[i] = v;
    else static_cast<bf16*>(scale)[i] = to_bf(v);
  }
}

Dims dims_of(const QuantStack& w) {
  return {w.count, w.rows, w.cols, w.block_rows, w.block_cols, w.group, w.scale_rows(), w.scale_cols(), w.row_offset,
          w.col_offset,
          static_cast<size_t>(w.scale_rows() * w.scale_cols()),
          w.format == QuantStack::Format::Fp8Block && w.scale_type == ScaleType::F32};
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 16)); }

}  // namespace

void dequantize(const QuantStack& w, Tensor out, cudaStream_t s) {
  E3_REQUIRE(w.quantized() && out.dtype == DType::BF16 && out.rows == w.count * w.rows && out.cols == w.cols,
             ErrorKind::Internal, "cuda dequantize of {} x [{}, {}] into {}", w.count, w.rows, w.cols, out.shape_str());
  if (w.count == 0 || w.rows == 0 || w.cols == 0) return;
  const Dims d = dims_of(w);
  const int64_t rows = w.count * w.rows;
  const bool fp8 = w.format == QuantStack::Format::Fp8Block;
  const bool by_rows = w.cols % 8 == 0 && out.stride % 8 == 0 && reinterpret_cast<uintptr_t>(out.data) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(w.q) % 16 == 0 && reinterpret_cast<uintptr_t>(w.scale) % 4 == 0 &&
                       (fp8 ? w.block_cols % 8 == 0 && w.col_offset % 8 == 0 : w.group % 8 == 0) &&
                       rows < (int64_t{1} << 31);
  if (by_rows && fp8) {
    dequant_fp8_rows<<<static_cast<unsigned>(rows), 128, 0, s>>>(static_cast<const uint8_t*>(w.q), w.scale, d,
                                                                 out.as<bf16>(), out.stride);
  } else if (by_rows) {
    dequant_int4_rows<<<static_cast<unsigned>(rows), 128, 0, s>>>(static_cast<const uint32_t*>(w.q),
                                                                  static_cast<const bf16*>(w.scale), d, out.as<bf16>(),
                                                                  out.stride);
  } else if (fp8) {
    dequant_fp8_kernel<<<grid_for(rows * w.cols), kThreads, 0, s>>>(static_cast<const uint8_t*>(w.q), w.scale, d,
                                                                    out.as<bf16>(), out.stride);
  } else {
    dequant_int4_kernel<<<grid_for(rows * ((w.cols + 7) / 8)), kThreads, 0, s>>>(
        static_cast<const uint32_t*>(w.q), static_cast<const bf16*>(w.scale), d, out.as<bf16>(), out.stride);
  }
  E3_CUDA_LAUNCH_CHECK("dequantize");
}

void fill_random_quant(const QuantStack& w, uint64_t seed, cudaStream_t s) {
  if (!w.quantized() || w.count == 0) return;
  const size_t q_bytes = static_cast<size_t>(w.count) * w.matrix_q_bytes();
  const size_t scales = static_cast<size_t>(w.count) * static_cast<size_t>(w.scale_rows() * w.scale_cols());
  random_quant_kernel<<<grid_for(static_cast<int64_t>(std::max(q_bytes, scales))), kThreads, 0, s>>>(
      static_cast<uint8_t*>(w.q), q_bytes, w.format == QuantStack::Format::Fp8Block, w.scale, scales,
      w.format == QuantStack::Format::Fp8Block && w.scale_type == ScaleType::F32, random_quant_scale(w), seed);
  E3_CUDA_LAUNCH_CHECK("fill_random_quant");
}

namespace {

// One block per row: a reduction for the row's amax and first non-finite column, then the
// codes. Every step is the one encode_e4m3_row takes (exact max, IEEE division, the shared
// rounding), so the bytes equal the CPU's whatever the order of the reduction.
template <typename T>
__global__ void encode_e4m3_kernel(const T* src, int64_t stride, int64_t H, uint8_t* dst) {
  const T* x = src + static_cast<int64_t>(blockIdx.x) * stride;
  uint8_t* out = dst + static_cast<int64_t>(blockIdx.x) * (H + 4);
  float amax = 0;
  int64_t bad = H;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    const float a = fabsf(static_cast<float>(x[c]));
    if (!(a <= 3.402823466e38f)) bad = c < bad ? c : bad;
    else amax = fmaxf(amax, a);
  }
  for (int o = 16; o > 0; o >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const auto other = static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(bad), o));
    bad = other < bad ? other : bad;
  }
  __shared__ float s_amax[kThreads / 32];
  __shared__ int64_t s_bad[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  if (lane == 0) {
    s_amax[warp] = amax;
    s_bad[warp] = bad;
  }
  __syncthreads();
  amax = 0;
  bad = H;
  for (int w = 0; w < warps; ++w) {
    amax = fmaxf(amax, s_amax[w]);
    bad = s_bad[w] < bad ? s_bad[w] : bad;
  }
  float scale;
  if (bad < H) {
    for (int64_t c = threadIdx.x; c < H; c += blockDim.x)
      out[c] = c < 4 ? static_cast<uint8_t>(static_cast<uint32_t>(bad) >> (8 * c)) : 0;
    scale = e4m3_bad_row_scale(static_cast<float>(x[bad]));
  } else {
    scale = e4m3_row_scale(amax);
    for (int64_t c = threadIdx.x; c < H; c += blockDim.x)
      out[c] = scale == 0.0f ? 0 : float_to_e4m3fn_sat(div_rn(static_cast<float>(x[c]), scale));
  }
  if (threadIdx.x == 0) {
    uint32_t bits;
    memcpy(&bits, &scale, 4);
    for (int i = 0; i < 4; ++i) out[H + i] = static_cast<uint8_t>(bits >> (8 * i));  // any alignment
  }
}

}  // namespace

void encode_e4m3_rows(Tensor src, Tensor dst, cudaStream_t s) {
  E3_REQUIRE(dst.dtype == DType::U8 && dst.rows == src.rows && dst.cols == src.cols + 4 && dst.contiguous() &&
                 (src.dtype == DType::F32 || src.dtype == DType::BF16),
             ErrorKind::Internal, "encode_e4m3_rows {} ({}) into {}", src.shape_str(), dtype_name(src.dtype),
             dst.shape_str());
  if (src.rows == 0) return;
  const auto rows = static_cast<unsigned>(src.rows);
  if (src.dtype == DType::F32) {
    encode_e4m3_kernel<float><<<rows, kThreads, 0, s>>>(src.as<const float>(), src.stride, src.cols, dst.as<uint8_t>());
  } else {
    encode_e4m3_kernel<bf16><<<rows, kThreads, 0, s>>>(src.as<const bf16>(), src.stride, src.cols, dst.as<uint8_t>());
  }
  E3_CUDA_LAUNCH_CHECK("encode_e4m3_rows");
}

}  // namespace e3::kernels::cuda
