// The grouped expert GEMM on Hopper (sm_90a): warpgroup MMA (wgmma) from 128-byte-swizzled
// shared memory. Rows of A are gathered per expert (the token permutation), so tiles are
// loaded with cp.async rather than the tensor copy engine, which cannot gather rows. Built
// only into the sm_90a image; moe_cuda.cu falls back to the portable mma.sync kernel when
// hopper_grouped_gemm_built() says this image is absent or the GPU is not sm_90.
#include "kernels/grouped_gemm_cuda.cuh"

namespace e3::kernels::cuda {
namespace {

// 128 x 256 output tile per block: two warpgroups of m64 x n256, k 64 per stage (one 128 B
// swizzle row), 4 stages of 48 KiB. With the silu fused, the 256 B-tile rows are 128 gate
// rows and the 128 matching up rows, so each thread holds a gate value and its up value.
constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kThreads = 256;
constexpr int kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2, kStageBytes = kABytes + kBBytes;
constexpr size_t kSmemBytes = size_t{kStages} * kStageBytes + 1024;  // + alignment slack for the swizzle

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

template <bool FUSE_SILU>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_wgmma_kernel(GroupedArgs g) {
#ifdef E3_WGMMA
  extern __shared__ unsigned char raw_smem[];
  const uint32_t raw = smem_addr(raw_smem);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = raw_smem + (base - raw);

  const int tile = blockIdx.x;
  if (tile >= g.tile_offsets[g.experts]) return;
  int lo = 0, hi = g.experts;  // the expert whose tiles hold `tile`
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (g.tile_offsets[mid] <= tile) lo = mid;
    else hi = mid;
  }
  const int e = lo;
  const int row0 = g.row_offsets[e] + (tile - g.tile_offsets[e]) * kBM;
  const int rows = min(kBM, g.row_offsets[e + 1] - row0);
  const int half = g.n / 2;
  const int n0 = blockIdx.y * (FUSE_SILU ? kBN / 2 : kBN);  // first output column
  const bf16* W = g.w + int64_t{e} * g.n * g.k;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int k_tiles = (g.k + kBK - 1) / kBK;

  // Each thread loads the same rows in every stage; resolve them (and the gather) once.
  constexpr int kAPer = kBM * 8 / kThreads, kBPer = kBN * 8 / kThreads;
  const int chunk = tid % 8;
  const bf16* a_src[kAPer];
  const bf16* b_src[kBPer];
#pragma unroll
  for (int j = 0; j < kAPer; ++j) {
    const int r = tid / 8 + j * (kThreads / 8);
    const int64_t src_row = r < rows ? (g.a_rows ? g.a_rows[row0 + r] : row0 + r) : -1;
    a_src[j] = src_row >= 0 ? g.a + src_row * g.lda + chunk * 8 : nullptr;
  }
#pragma unroll
  for (int j = 0; j < kBPer; ++j) {
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

  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kBK;
    const bool k_ok = k0 + chunk * 8 < g.k;
    unsigned char* sa = smem + stage * kStageBytes;
    unsigned char* sb = sa + kABytes;
#pragma unroll
    for (int j = 0; j < kAPer; ++j) {
      const int r = tid / 8 + j * (kThreads / 8);
      const bool ok = k_ok && a_src[j];
      cp_async_16(sa + sw128_offset(r, chunk), ok ? a_src[j] + k0 : g.a, ok);
    }
#pragma unroll
    for (int j = 0; j < kBPer; ++j) {
      const int r = tid / 8 + j * (kThreads / 8);
      const bool ok = k_ok && b_src[j];
      cp_async_16(sb + sw128_offset(r, chunk), ok ? b_src[j] + k0 : g.w, ok);
    }
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
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 3>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> tensor-core reads
    __syncthreads();
    const int next = kt + kStages - 2;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();

    const uint32_t sa = base + (kt % kStages) * kStageBytes + wg * (kBM / 2) * 128;
    const uint32_t sb = base + (kt % kStages) * kStageBytes + kABytes;
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

template <bool FUSE>
void launch(const GroupedArgs& g, int64_t max_rows, cudaStream_t s) {
  E3_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_wgmma_kernel<FUSE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmemBytes)));
  const int64_t max_tiles = (max_rows + kBM - 1) / kBM + g.experts;  // at most one partial tile per expert
  const int cols = FUSE ? g.n / 2 : g.n, per_block = FUSE ? kBN / 2 : kBN;
  const dim3 grid(static_cast<unsigned>(max_tiles), static_cast<unsigned>((cols + per_block - 1) / per_block));
  grouped_gemm_wgmma_kernel<FUSE><<<grid, kThreads, kSmemBytes, s>>>(g);
  E3_CUDA_LAUNCH_CHECK("grouped_gemm_wgmma");
}

}  // namespace

int grouped_gemm_hopper_tile_rows() { return kBM; }

void grouped_gemm_hopper(const GroupedArgs& g, bool fuse_silu, int64_t max_rows, cudaStream_t s) {
  if (fuse_silu) launch<true>(g, max_rows, s);
  else launch<false>(g, max_rows, s);
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
