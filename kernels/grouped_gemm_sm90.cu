// The grouped expert GEMM on Hopper (sm_90a): warpgroup MMA (wgmma) from 128-byte-swizzled
// shared memory. Rows of A are gathered per expert (the token permutation), so tiles are
// loaded with cp.async rather than the tensor copy engine, which cannot gather rows. Built
// only into the sm_90a image; moe_cuda.cu falls back to the portable mma.sync kernel when
// hopper_grouped_gemm_built() says this image is absent or the GPU is not sm_90.
#include <cuda_fp16.h>

#include "kernels/grouped_gemm_cuda.cuh"

namespace e3::kernels::cuda {
namespace {

// 128 x 256 output tile per block: two warpgroups of m64 x n256, k 64 per stage (one 128 B
// swizzle row), 4 stages of 48 KiB. With the silu fused, the 256 B-tile rows are 128 gate
// rows and the 128 matching up rows, so each thread holds a gate value and its up value.
constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kThreads = 256;
constexpr int kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2, kStageBytes = kABytes + kBBytes;
constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + 1024;  // + alignment slack for the swizzle

// With quantized B (QB != kBf16) a stage holds the A tile and B's packed bytes (at most 64 per
// row: FP8), and two bf16 B tiles, converted from the packed bytes, alternate outside the stages.
enum QuantB { kBf16 = 0, kInt4 = 1, kFp8 = 2 };
constexpr int kPackedBytes = kBN * kBK, kQStageBytes = kABytes + kPackedBytes;
constexpr size_t kQSmemBytes = size_t{kStages} * kQStageBytes + 2 * size_t{kBBytes} + 1024;
template <int QB>
constexpr int stage_bytes() { return QB == kBf16 ? kStageBytes : kQStageBytes; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define E3_WGMMA 1
#endif

#ifdef E3_WGMMA
// Shared-memory matrix descriptor for a K-major tile in the 128 B swizzle: rows of 128 B,
// 8-row groups 1024 B apart (the stride byte offset); the leading byte offset is unused here.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
  return (uint64_t{(saddr & 0x3FFFFu) >> 4}) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

// Byte offset of 16-byte chunk `c` of row `r` in a 128 B-swizzled tile (1024 B aligned).
__device__ __forceinline__ uint32_t sw128_offset(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }


// d[64 x 256] += A[64 x 16] B[256 x 16]^T, both K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}
#endif

template <bool FUSE_SILU, int QB>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_wgmma_kernel(GroupedArgs g, QuantWeights qw) {
#ifdef E3_WGMMA
  constexpr int kStage = stage_bytes<QB>();
  extern __shared__ unsigned char raw_smem[];
  const uint32_t raw = smem_addr(raw_smem);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = raw_smem + (base - raw);

  const ExpertTile et = expert_tile(g, blockIdx.x, kBM);
  if (et.expert < 0) return;
  const int e = et.expert, row0 = et.row0, rows = et.rows;
  const int half = g.n / 2;
  const int n0 = blockIdx.y * (FUSE_SILU ? kBN / 2 : kBN);  // first output column
  const bf16* W = QB == kBf16 ? g.w + int64_t{e} * g.n * g.k : nullptr;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int k_tiles = (g.k + kBK - 1) / kBK;

  // Each thread loads the same rows in every stage; resolve them (and the gather) once.
  constexpr int kAPer = kBM * 8 / kThreads, kBPer = kBN * 8 / kThreads;
  const int chunk = tid % 8;
  const bf16* a_src[kAPer];
  const bf16* b_src[kBPer];
  // Quantized B: the row of the stacked matrices behind B-tile row r, or -1. The stack's rows
  // are contiguous, so expert e's N rows start at row e N; with the silu fused, gate row c of
  // expert e is row c of matrix 2e and its up row c is row c of matrix 2e + 1.
  auto quant_row = [&](int r) -> int64_t {
    if (FUSE_SILU) {
      const int c = n0 + r % (kBN / 2);
      return c < half ? (2 * int64_t{e} + (r < kBN / 2 ? 0 : 1)) * qw.rows + c : -1;
    }
    return n0 + r < g.n ? int64_t{e} * g.n + n0 + r : -1;
  };
  const int64_t q_row = QB != kBf16 ? quant_row(tid) : -1;  // thread t converts B-tile row t
#pragma unroll
  for (int j = 0; j < kAPer; ++j) {
    const int r = tid / 8 + j * (kThreads / 8);
    const int64_t src_row = r < rows ? (g.a_rows ? g.a_rows[row0 + r] : row0 + r) : -1;
    a_src[j] = src_row >= 0 ? g.a + src_row * g.lda + chunk * 8 : nullptr;
  }
#pragma unroll
  for (int j = 0; j < kBPer; ++j) {
    b_src[j] = nullptr;
    if (QB != kBf16) continue;
    const int r = tid / 8 + j * (kThreads / 8);
    int wr;
    if (FUSE_SILU) {
      const int col = n0 + r % (kBN / 2);
      wr = col < half ? (r < kBN / 2 ? col : half + col) : -1;
    } else {
      wr = n0 + r < g.n ? n0 + r : -1;
    }
    b_src[j] = wr >= 0 ? W + int64_t{wr} * g.k + chunk * 8 : nullptr;
  }

  // The packed bytes of B-tile row r for k-tile kt: 32 (INT4) or 64 (FP8), in 16-byte chunks.
  constexpr int kPackedRow = QB == kInt4 ? kBK / 2 : kBK, kPackedChunks = kPackedRow / 16;
  auto load_packed = [&](unsigned char* sp, int kt) {
    for (int i = tid; i < kBN * kPackedChunks; i += kThreads) {
      const int r = i / kPackedChunks, c = i % kPackedChunks;
      const int64_t row = quant_row(r);
      const bool ok = row >= 0;
      const unsigned char* src = static_cast<const unsigned char*>(qw.q) + (ok ? row : 0) * qw.row_bytes +
                                 int64_t{kt} * kPackedRow + c * 16;
      cp_async_16(sp + r * kPackedRow + c * 16, src, ok);
    }
  };

  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kBK;
    const bool k_ok = k0 + chunk * 8 < g.k;
    unsigned char* sa = smem + stage * kStage;
    unsigned char* sb = sa + kABytes;
    if (QB != kBf16) load_packed(sb, kt);
#pragma unroll
    for (int j = 0; j < kAPer; ++j) {
      const int r = tid / 8 + j * (kThreads / 8);
      const bool ok = k_ok && a_src[j];
      cp_async_16(sa + sw128_offset(r, chunk), ok ? a_src[j] + k0 : g.a, ok);
    }
#pragma unroll
    for (int j = 0; j < kBPer; ++j) {
      if (QB != kBf16) break;
      const int r = tid / 8 + j * (kThreads / 8);
      const bool ok = k_ok && b_src[j];
      cp_async_16(sb + sw128_offset(r, chunk), ok ? b_src[j] + k0 : g.w, ok);
    }
  };

  // The scales of B-tile row `tid` for k-tile kt (INT4: the two 32-column groups; FP8: one
  // block), read one step ahead so that their latency hides behind a step.
  struct Scales {
    float s0 = 0.0f, s1 = 0.0f;
  };
  auto fetch_scales = [&](int kt) {
    Scales sc;
    if (q_row < 0 || QB == kBf16) return sc;
    const int k0 = kt * kBK;
    if (QB == kInt4) {
      const bf16* srow = static_cast<const bf16*>(qw.scale) + q_row * qw.scale_cols;
      sc.s0 = to_f(srow[k0 / qw.group]);
      sc.s1 = to_f(srow[(k0 + 32) / qw.group]);
    } else {
      const int64_t m = q_row / qw.rows, rr = q_row % qw.rows;
      const int64_t si = m * qw.matrix_scales + (rr / qw.block_rows) * qw.scale_cols + k0 / qw.block_cols;
      sc.s0 = qw.f32_scale ? static_cast<const float*>(qw.scale)[si] : to_f(static_cast<const bf16*>(qw.scale)[si]);
    }
    return sc;
  };

  // Packed row -> 64 bf16 values of B-tile row `tid`, in the 128 B swizzle: bf16(q * scale),
  // the values the dequantize kernels give. INT4 in bf16x2 arithmetic: 0x4300 | nibble is the
  // bf16 128 + nibble, minus 136 is the exact value, and one bf16 multiply rounds the exact
  // product once (it fits fp32, so this equals rounding the fp32 product). FP8 through the
  // e4m3x2 -> f16x2 conversion (exact), then the fp32 product rounded once.
  auto convert = [&](const unsigned char* sp, unsigned char* bt, const Scales& sc) {
    const int r = tid;
    uint32_t out[32];
    if (q_row < 0) {
#pragma unroll
      for (int i = 0; i < 32; ++i) out[i] = 0;
    } else if (QB == kInt4) {
      const uint4 lo = *reinterpret_cast<const uint4*>(sp + r * kPackedRow);
      const uint4 hi = *reinterpret_cast<const uint4*>(sp + r * kPackedRow + 16);
      const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      const __nv_bfloat162 offset = __floats2bfloat162_rn(136.0f, 136.0f);
      const __nv_bfloat162 s_lo = __floats2bfloat162_rn(sc.s0, sc.s0), s_hi = __floats2bfloat162_rn(sc.s1, sc.s1);
#pragma unroll
      for (int w = 0; w < 8; ++w) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t t = words[w] >> (8 * j);
          const uint32_t bits = (t & 0xFu) | ((t << 12) & 0xF0000u) | 0x43004300u;
          const __nv_bfloat162 v = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&bits), offset);
          const __nv_bfloat162 p = __hmul2(v, w < 4 ? s_lo : s_hi);
          out[4 * w + j] = *reinterpret_cast<const uint32_t*>(&p);
        }
      }
    } else {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const uint4 v = *reinterpret_cast<const uint4*>(sp + r * kPackedRow + 16 * c);
        const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int w = 0; w < 4; ++w)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            uint32_t h2;
            const uint16_t pair = static_cast<uint16_t>(words[w] >> (16 * j));
            asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(pair));
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2));
            out[8 * c + 2 * w + j] = pack_bf16(__fmul_rn(f.x, sc.s0), __fmul_rn(f.y, sc.s0));
          }
      }
    }
#pragma unroll
    for (int c = 0; c < 8; ++c)
      *reinterpret_cast<uint4*>(bt + sw128_offset(r, c)) =
          make_uint4(out[4 * c], out[4 * c + 1], out[4 * c + 2], out[4 * c + 3]);
  };

  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;

  // Loads run kStages - 2 tiles ahead: the stage refilled at step kt was last read by the
  // wgmma of step kt - 2, which every warpgroup has waited for before the barrier.
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  Scales scales_next = fetch_scales(0);
  for (int kt = 0; kt < k_tiles; ++kt) {
    const Scales scales = scales_next;
    if (QB != kBf16 && kt + 1 < k_tiles) scales_next = fetch_scales(kt + 1);
    cp_async_wait<kStages - 3>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> tensor-core reads
    __syncthreads();
    const int next = kt + kStages - 2;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();

    const uint32_t sa = base + (kt % kStages) * kStage + wg * (kBM / 2) * 128;
    uint32_t sb = base + (kt % kStages) * kStage + kABytes;
    if (QB != kBf16) {
      // The B tile converted two steps ago was last read by wgmma kt - 2, which every
      // warpgroup has waited for before the barrier above.
      const uint32_t bt = base + kStages * kStage + (kt % 2) * kBBytes;
      convert(smem + (kt % kStages) * kStage + kABytes, smem + (bt - base), scales);
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();
      sb = bt;
    }
#pragma unroll
    for (int i = 0; i < 128; ++i) fence_operand(d[i]);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) wgmma_m64n256k16(d, sw128_desc(sa + kk * 32), sw128_desc(sb + kk * 32));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < 128; ++i) fence_operand(d[i]);
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
  for (int i = 0; i < 128; ++i) fence_operand(d[i]);
  cp_async_wait<0>();

  // Accumulator layout of m64nN: n8 block j, register i -> row 16 warp + lane / 4 + 8 (i / 2),
  // column 8 j + 2 (lane % 4) + i % 2.
  const int r_a = wg * 64 + warp * 16 + lane / 4, r_b = r_a + 8;
  if (FUSE_SILU) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int col = n0 + 8 * j + 2 * (lane % 4);
      if (col >= half) continue;
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float gte = round_bf(d[4 * j + i]), up = round_bf(d[4 * (j + 16) + i]);
        v[i] = round_bf(gte / (1.0f + __expf(-gte))) * up;
      }
      if (r_a < rows) *reinterpret_cast<uint32_t*>(g.c + int64_t{row0 + r_a} * half + col) = pack_bf16(v[0], v[1]);
      if (r_b < rows) *reinterpret_cast<uint32_t*>(g.c + int64_t{row0 + r_b} * half + col) = pack_bf16(v[2], v[3]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int col = n0 + 8 * j + 2 * (lane % 4);
      if (col >= g.n) continue;
      if (r_a < rows) *reinterpret_cast<uint32_t*>(g.c + int64_t{row0 + r_a} * g.n + col) = pack_bf16(d[4 * j], d[4 * j + 1]);
      if (r_b < rows)
        *reinterpret_cast<uint32_t*>(g.c + int64_t{row0 + r_b} * g.n + col) = pack_bf16(d[4 * j + 2], d[4 * j + 3]);
    }
  }
#endif
}

__global__ void wgmma_probe_kernel(int* built) {
#ifdef E3_WGMMA
  *built = 1;
#else
  *built = 0;
#endif
}

template <bool FUSE, int QB>
void launch(const GroupedArgs& g, const QuantWeights& qw, int64_t max_rows, cudaStream_t s) {
  const size_t smem = QB == kBf16 ? kSmemBytes : kQSmemBytes;
  E3_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_wgmma_kernel<FUSE, QB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int64_t max_tiles = (max_rows + kBM - 1) / kBM + g.experts;  // at most one partial tile per expert
  const int cols = FUSE ? g.n / 2 : g.n, per_block = FUSE ? kBN / 2 : kBN;
  const dim3 grid(static_cast<unsigned>(max_tiles), static_cast<unsigned>((cols + per_block - 1) / per_block));
  grouped_gemm_wgmma_kernel<FUSE, QB><<<grid, kThreads, smem, s>>>(g, qw);
  E3_CUDA_LAUNCH_CHECK("grouped_gemm_wgmma");
}

template <int QB>
void launch_both(const GroupedArgs& g, const QuantWeights& qw, bool fuse_silu, int64_t max_rows, cudaStream_t s) {
  if (fuse_silu) launch<true, QB>(g, qw, max_rows, s);
  else launch<false, QB>(g, qw, max_rows, s);
}

}  // namespace

int grouped_gemm_hopper_tile_rows() { return kBM; }

void grouped_gemm_hopper(const GroupedArgs& g, bool fuse_silu, int64_t max_rows, cudaStream_t s) {
  launch_both<kBf16>(g, QuantWeights{}, fuse_silu, max_rows, s);
}

bool grouped_gemm_hopper_reads(const QuantStack& w) {
  // 16-byte cp.async of the packed rows; 4-byte scale reads.
  if (reinterpret_cast<uintptr_t>(w.q) % 16 != 0 || reinterpret_cast<uintptr_t>(w.scale) % 4 != 0) return false;
  if (w.format == QuantStack::Format::Int4Group) return w.cols % kBK == 0 && w.group % 32 == 0;
  if (w.format == QuantStack::Format::Fp8Block)
    return w.cols % kBK == 0 && w.block_cols % kBK == 0 && w.row_offset == 0 && w.col_offset == 0;
  return false;
}

void grouped_gemm_hopper_quantized(const GroupedArgs& g, const QuantStack& w, bool fuse_silu, int64_t max_rows,
                                   cudaStream_t s) {
  E3_REQUIRE(grouped_gemm_hopper_reads(w) && w.cols == g.k, ErrorKind::Internal,
             "grouped_gemm_hopper_quantized: unsupported stack [{}, {}]", w.rows, w.cols);
  QuantWeights qw;
  qw.q = w.q;
  qw.scale = w.scale;
  qw.rows = w.rows;
  qw.row_bytes = w.format == QuantStack::Format::Int4Group ? w.cols / 2 : w.cols;
  qw.scale_cols = w.scale_cols();
  qw.matrix_scales = w.scale_rows() * w.scale_cols();
  qw.group = w.group;
  qw.block_rows = w.block_rows;
  qw.block_cols = w.block_cols;
  qw.f32_scale = w.scale_type == ScaleType::F32;
  if (w.format == QuantStack::Format::Int4Group) launch_both<kInt4>(g, qw, fuse_silu, max_rows, s);
  else launch_both<kFp8>(g, qw, fuse_silu, max_rows, s);
}

bool hopper_grouped_gemm_built(int device) {
  cudaDeviceProp prop{};
  E3_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (prop.major != 9 || prop.minor != 0) return false;
  int* flag = nullptr;
  E3_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  int built = 0;
  wgmma_probe_kernel<<<1, 1>>>(flag);
  const cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) E3_CUDA_CHECK(cudaMemcpy(&built, flag, sizeof built, cudaMemcpyDeviceToHost));
  cudaFree(flag);
  // No image for this GPU at all (cudaErrorNoKernelImageForDevice) means no sm_90a image either.
  return launched == cudaSuccess && built == 1;
}

}  // namespace e3::kernels::cuda
