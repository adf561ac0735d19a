// The warp-specialised grouped expert GEMM on Hopper (sm_90a), E3_GEMM_VARIANT=5 and the
// default there. One persistent block per SM walks the (expert m-tile, n-tile) pairs.
// Warpgroup 0 only loads: its first thread has the tensor copy engine bring each B tile (the
// experts' weights, contiguous rows, so a 2-D tensor map serves every expert), while its 128
// threads gather the A rows with cp.async (the token permutation, which the copy engine cannot
// follow). Warpgroups 1 and 2 only compute (wgmma m64n256k16, 64 rows each) and run the
// epilogue, while the loader already fills the stages of the next tile. Stages are handed over
// through mbarriers: `full` (the loader's threads and the copy engine's bytes) and `empty` (one
// arrival per computing warp once its wgmma has read the stage). Every output element sums its
// k-tiles in the same order as grouped_gemm_sm90.cu, so both kernels give the same bits.
//
// With quantized experts (INT4 or FP8) a stage carries the packed bytes; each computing thread
// converts one B row into one of three bf16 tiles while the previous step's wgmma runs.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "kernels/wgmma_sm90.cuh"

namespace e3::kernels::cuda {
namespace {

using namespace sm90;

constexpr int kBM = 128, kBN = kTileN, kBK = kTileK;
constexpr int kThreads = 384, kLoaderThreads = 128, kComputeThreads = 256;
constexpr int kStages = 4;
// The loader signals a stage's A rows kSignalLag loads after issuing them (once cp.async says
// they have landed and its proxy fence is done), so that several loads stay in flight.
constexpr int kSignalLag = 2;
constexpr int kABytes = kBM * kBK * 2, kBBytes = kBN * kBK * 2;
// Registers per thread after setmaxnreg: the loader needs few, the 128 accumulators many.
constexpr int kLoaderRegs = 56, kComputeRegs = 224;
static_assert(kLoaderRegs * kLoaderThreads + kComputeRegs * kComputeThreads <= 65536, "register file");

template <int QB>
struct Smem {
  static constexpr int kBStage = QB == kBf16 ? kBBytes : kBN * packed_row_bytes<QB>();
  static constexpr int kStage = kABytes + kBStage;  // a multiple of 1024: the swizzle's alignment
  static constexpr int kConverted = QB == kBf16 ? 0 : 3;
  static constexpr size_t kBytes = size_t{kStages} * kStage + size_t{kConverted} * kBBytes + 1024;
};

#ifdef E3_WGMMA
__device__ __forceinline__ void compute_barrier() { asm volatile("bar.sync 1, %0;\n" ::"n"(kComputeThreads) : "memory"); }
#endif

template <bool FUSE_SILU, int QB>
__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_ws_kernel(const __grid_constant__ CUtensorMap b_map, GroupedArgs g, QuantWeights qw, int n_tiles) {
#ifdef E3_WGMMA
  using S = Smem<QB>;
  extern __shared__ unsigned char raw_smem[];
  __shared__ alignas(8) uint64_t full_bar[kStages], empty_bar[kStages];
  const uint32_t raw = smem_addr(raw_smem);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* smem = raw_smem + (base - raw);
  const int tid = threadIdx.x, wg = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(smem_addr(&full_bar[s]), kLoaderThreads + 1);  // + the copy engine's expect_tx arrival
      mbar_init(smem_addr(&empty_bar[s]), kComputeThreads / 32);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int total = g.tile_offsets[g.experts] * n_tiles;
  const int k_tiles = (g.k + kBK - 1) / kBK;
  const int per_block = FUSE_SILU ? kBN / 2 : kBN;
  constexpr int kPackedRow = packed_row_bytes<QB>();

  if (wg == 0) {
    // --- loader ---
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kLoaderRegs));
    const int chunk = tid % 8;
    constexpr int kAPer = kBM * 8 / kLoaderThreads;
    int stage = 0, issued = 0, signalled = 0, signal_stage = 0;
    uint32_t phase = 0;
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
      const ExpertTile et = expert_tile(g, t / n_tiles, kBM);
      const int n0 = (t % n_tiles) * per_block;
      // B rows in the tensor map (expert e's N rows start at e N): two boxes of 128 rows, the
      // gate rows and their up rows with the silu fused, else 256 consecutive rows.
      const int b_row0 = et.expert * g.n + n0, b_row1 = FUSE_SILU ? b_row0 + g.n / 2 : b_row0 + kBN / 2;
      const bf16* a_src[kAPer];
#pragma unroll
      for (int j = 0; j < kAPer; ++j) {
        const int r = tid / 8 + j * (kLoaderThreads / 8);
        const int64_t src_row = r < et.rows ? (g.a_rows ? g.a_rows[et.row0 + r] : et.row0 + r) : -1;
        a_src[j] = src_row >= 0 ? g.a + src_row * g.lda + chunk * 8 : nullptr;
      }
      for (int kt = 0; kt < k_tiles; ++kt) {
        mbar_wait(smem_addr(&empty_bar[stage]), phase ^ 1);
        const uint32_t sa = base + stage * S::kStage, sb = sa + kABytes;
        if (tid == 0) {
          const uint32_t full = smem_addr(&full_bar[stage]);
          mbar_arrive_expect_tx(full, S::kBStage);
          const int inner = QB == kBf16 ? kt * kBK : kt * kPackedRow;
          tma_load_2d(sb, &b_map, full, inner, b_row0);
          tma_load_2d(sb + S::kBStage / 2, &b_map, full, inner, b_row1);
        }
        const int k0 = kt * kBK;
        const bool k_ok = k0 + chunk * 8 < g.k;
        unsigned char* sa_ptr = smem + stage * S::kStage;
#pragma unroll
        for (int j = 0; j < kAPer; ++j) {
          const int r = tid / 8 + j * (kLoaderThreads / 8);
          const bool ok = k_ok && a_src[j];
          cp_async_16(sa_ptr + sw128_offset(r, chunk), ok ? a_src[j] + k0 : g.a, ok);
        }
        cp_async_commit();
        ++issued;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
        if (issued - signalled > kSignalLag) {
          cp_async_wait<kSignalLag>();
          fence_async_shared();
          mbar_arrive(smem_addr(&full_bar[signal_stage]));
          ++signalled;
          signal_stage = (signal_stage + 1) % kStages;
        }
      }
    }
    cp_async_wait<0>();
    fence_async_shared();
    for (; signalled < issued; ++signalled) {
      mbar_arrive(smem_addr(&full_bar[signal_stage]));
      signal_stage = (signal_stage + 1) % kStages;
    }
  } else {
    // --- compute ---
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kComputeRegs));
    const int ctid = tid - kLoaderThreads, cwg = wg - 1, warp = (tid / 32) % 4, lane = tid % 32;
    const uint32_t converted = base + kStages * S::kStage;
    int stage = 0, cbuf = 0;
    uint32_t phase = 0;
    auto release = [&](int s) {
      __syncwarp();
      if (lane == 0) mbar_arrive(smem_addr(&empty_bar[s]));
    };
    // Quantized B: wait for the stage of the next step and convert B row ctid of it into the
    // converted tile cbuf (last read three steps ago, by wgmmas every warpgroup has waited for
    // before it reached the barrier of the conversion after them).
    auto convert_next = [&](int64_t q_row, const RowScales& sc) {
      mbar_wait(smem_addr(&full_bar[stage]), phase);
      const unsigned char* packed = smem + stage * S::kStage + kABytes + ctid * kPackedRow;
      convert_row<QB>(packed, smem + (converted - base) + cbuf * kBBytes, ctid, q_row >= 0, sc);
      fence_async_shared();
      compute_barrier();
    };
    for (int t = blockIdx.x; t < total; t += gridDim.x) {
      const ExpertTile et = expert_tile(g, t / n_tiles, kBM);
      const int n0 = (t % n_tiles) * per_block;
      const int64_t q_row = QB != kBf16 ? quant_row<FUSE_SILU>(g, qw, et.expert, n0, ctid) : -1;
      RowScales scales_next;
      if (QB != kBf16) {
        convert_next(q_row, fetch_scales<QB>(qw, q_row, 0));
        if (k_tiles > 1) scales_next = fetch_scales<QB>(qw, q_row, 1);
      }
      float d[128];
#pragma unroll
      for (int i = 0; i < 128; ++i) d[i] = 0.0f;
      int prev_stage = -1;
      for (int kt = 0; kt < k_tiles; ++kt) {
        if (QB == kBf16) mbar_wait(smem_addr(&full_bar[stage]), phase);
        const uint32_t sa = base + stage * S::kStage + cwg * (kBM / 2) * 128;
        const uint32_t sb = QB == kBf16 ? base + stage * S::kStage + kABytes : converted + cbuf * kBBytes;
#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(d[i]);
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) wgmma_m64n256k16(d, sw128_desc(sa + kk * 32), sw128_desc(sb + kk * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(d[i]);
        if (prev_stage >= 0) release(prev_stage);
        prev_stage = stage;
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
        if (QB != kBf16) {
          cbuf = (cbuf + 1) % 3;
          if (kt + 1 < k_tiles) {
            convert_next(q_row, scales_next);
            if (kt + 2 < k_tiles) scales_next = fetch_scales<QB>(qw, q_row, kt + 2);
          }
        }
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int i = 0; i < 128; ++i) fence_operand(d[i]);
      release(prev_stage);
      store_tile<FUSE_SILU>(g, d, et.row0, et.rows, n0, cwg * 64, warp, lane);
    }
  }
#endif
}

// The tensor map of B: a [rows, inner] matrix of bf16 (128 B swizzle, boxes of 64 x 128) or of
// packed bytes (no swizzle, boxes of box_inner bytes x 128 rows).
CUtensorMap b_tensor_map(const void* data, bool bf16_elements, uint64_t inner, uint64_t rows, uint32_t box_inner) {
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult found{};
  E3_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                                 cudaEnableDefault, &found));
  E3_REQUIRE(found == cudaDriverEntryPointSuccess && encode, ErrorKind::Internal,
             "the CUDA driver has no cuTensorMapEncodeTiled (query result {})", static_cast<int>(found));
  CUtensorMap map{};
  const cuuint64_t dims[2] = {inner, rows};
  const cuuint64_t strides[1] = {inner * (bf16_elements ? 2 : 1)};
  const cuuint32_t box[2] = {box_inner, kBN / 2};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult rc =
      encode(&map, bf16_elements ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
             const_cast<void*>(data), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             bf16_elements ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  E3_REQUIRE(rc == CUDA_SUCCESS, ErrorKind::Internal,
             "cuTensorMapEncodeTiled failed ({}) for B [{}, {}] at {}, box of {}", static_cast<int>(rc), rows, inner,
             data, box_inner);
  return map;
}

template <bool FUSE, int QB>
void launch(const GroupedArgs& g, const QuantWeights& qw, const CUtensorMap& map, int64_t max_rows, cudaStream_t s) {
  constexpr size_t smem = Smem<QB>::kBytes;
  E3_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_ws_kernel<FUSE, QB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const int cols = FUSE ? g.n / 2 : g.n, per_block = FUSE ? kBN / 2 : kBN;
  const int n_tiles = (cols + per_block - 1) / per_block;
  const int64_t max_tiles = ((max_rows + kBM - 1) / kBM + g.experts) * n_tiles;  // one partial m-tile per expert
  int device = 0, sms = 0;
  E3_CUDA_CHECK(cudaGetDevice(&device));
  E3_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(max_tiles, sms)));
  grouped_gemm_ws_kernel<FUSE, QB><<<blocks, kThreads, smem, s>>>(map, g, qw, n_tiles);
  E3_CUDA_LAUNCH_CHECK("grouped_gemm_ws");
}

template <int QB>
void launch_both(const GroupedArgs& g, const QuantWeights& qw, const CUtensorMap& map, bool fuse_silu,
                 int64_t max_rows, cudaStream_t s) {
  if (fuse_silu) launch<true, QB>(g, qw, map, max_rows, s);
  else launch<false, QB>(g, qw, map, max_rows, s);
}

}  // namespace

bool grouped_gemm_ws_reads(const GroupedArgs& g) {
  // The copy engine wants a 16-byte aligned base and row pitch; cp.async 16-byte A rows.
  return reinterpret_cast<uintptr_t>(g.w) % 16 == 0 && g.k % 8 == 0 && g.lda % 8 == 0 &&
         reinterpret_cast<uintptr_t>(g.a) % 16 == 0;
}

void grouped_gemm_ws(const GroupedArgs& g, bool fuse_silu, int64_t max_rows, cudaStream_t s) {
  E3_REQUIRE(grouped_gemm_ws_reads(g), ErrorKind::Internal, "grouped_gemm_ws: unaligned operands");
  const CUtensorMap map = b_tensor_map(g.w, true, static_cast<uint64_t>(g.k), uint64_t{static_cast<uint64_t>(g.experts)} * g.n, kBK);
  launch_both<kBf16>(g, QuantWeights{}, map, fuse_silu, max_rows, s);
}

void grouped_gemm_ws_quantized(const GroupedArgs& g, const QuantWeights& qw, bool int4, bool fuse_silu,
                               int64_t max_rows, cudaStream_t s) {
  const uint32_t box = int4 ? packed_row_bytes<kInt4>() : packed_row_bytes<kFp8>();
  const uint64_t stack_rows = uint64_t{static_cast<uint64_t>(g.experts)} * g.n;
  const CUtensorMap map = b_tensor_map(qw.q, false, static_cast<uint64_t>(qw.row_bytes), stack_rows, box);
  if (int4) launch_both<kInt4>(g, qw, map, fuse_silu, max_rows, s);
  else launch_both<kFp8>(g, qw, map, fuse_silu, max_rows, s);
}

}  // namespace e3::kernels::cuda
