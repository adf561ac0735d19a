// Variable-length causal attention over packed sequences, FlashAttention-style: each block
// owns 128 queries of one head of one sequence (16 per warp) and streams 64-key tiles of K and V
// through shared memory (three buffers filled with cp.async, two tiles ahead), keeping the
// softmax online. No [T, T] matrix exists anywhere. Q.K^T and P.V run on mma.sync m16n8k16
// (bf16 in, fp32 out).
//
// Each warp visits exactly the key tiles it would in a block of its own 64-query half (the
// kernel's earlier shape, 4 warps of 64 queries): the same tiles in the same order, the same
// arithmetic per row, so its rows come out with the same bits. Only tiles that cut through a
// warp's rows (the diagonal, the sequence's end, a window's edge) are masked; a mask is a
// no-op everywhere else.
#include <cmath>

#include "kernels/attention_common.cuh"
#include "kernels/cuda_common.cuh"
#include "kernels/ops_cuda.h"

namespace e3::kernels::cuda {
namespace {

constexpr int kBM = 128;      // queries per block (16 per warp)
constexpr int kHalf = 64;     // the query span whose key tiles a warp visits (see above)
constexpr int kBN = 64;       // keys per tile
constexpr int kWarps = kBM / 16;
constexpr int kStages = 3;    // K/V tile buffers: one being read, two being filled
constexpr int kPad = 8;       // row padding (bf16) that makes ldmatrix rows hit distinct banks

using Args = AttentionArgs;

template <int DQK, int DV>
constexpr size_t smem_bytes() {
  return sizeof(bf16) * (static_cast<size_t>(kBM) * (DQK + kPad) + size_t{kStages} * kBN * (DQK + kPad) +
                         size_t{kStages} * kBN * (DV + kPad));
}

// rows x COLS tile of a head into shared memory with row stride COLS + kPad; rows beyond
// `valid_rows` and columns beyond `dim` are zero.
// `safe` is any valid address: zero-filled chunks still name a source.
template <int COLS>
__device__ void load_tile(bf16* smem, const bf16* base, int64_t stride, int rows, int valid_rows, int dim,
                          const bf16* safe) {
  constexpr int kChunks = COLS / 8;
  for (int i = threadIdx.x; i < rows * kChunks; i += kWarps * 32) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool ok = r < valid_rows && c < dim;
    cp_async_16(smem + r * (COLS + kPad) + c, ok ? base + r * stride + c : safe, ok);
  }
}

template <int DQK, int DV>
__global__ void __launch_bounds__(kWarps * 32) flash_attention_kernel(Args a) {
  static_assert(DQK % 16 == 0 && DV % 16 == 0, "head dims are padded to multiples of 16");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sK = sQ + kBM * (DQK + kPad);
  bf16* sV = sK + kStages * kBN * (DQK + kPad);

  const int head = blockIdx.y;
  const int seq = blockIdx.x / a.tiles_per_seq;
  // The longest query tiles (most keys) first: they finish last otherwise.
  const int tile = a.tiles_per_seq - 1 - static_cast<int>(blockIdx.x % a.tiles_per_seq);
  const int start = a.cu_seqlens[seq];
  const int len = a.cu_seqlens[seq + 1] - start;
  const int q0 = tile * kBM;
  if (q0 >= len) return;
  const int kv_head = head / a.group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c4 = lane % 4;

  const bf16* qbase = a.q + (start + q0) * a.q_stride + int64_t{head} * a.dqk;
  const bf16* kbase = a.k + int64_t{start} * a.k_stride + int64_t{kv_head} * a.dqk;
  const bf16* vbase = a.v + int64_t{start} * a.v_stride + int64_t{kv_head} * a.dv;

  // The block's key tiles: causal up to its last query, from the window's lower bound.
  const int k_begin = first_key<kBN>(q0, a.window);
  const int num_tiles = (min(q0 + kBM, len) - k_begin + kBN - 1) / kBN;
  // This warp's: those of its 64-query half. Its rows, and the span where no mask is needed.
  const int half0 = q0 + warp * 16 / kHalf * kHalf;
  const int warp_k_begin = first_key<kBN>(half0, a.window);
  const int warp_k_last = half0 < len ? min(half0 + kHalf, len) - 1 : -1;  // a half past the end: none
  const int warp_row0 = q0 + warp * 16;
  const ScoreRows rows{warp_row0, warp_row0 + g, warp_row0 + g + 8, c4};  // this thread's two query rows

  const auto load_kv = [&](int t) {
    const int kv0 = k_begin + t * kBN, s = t % kStages;
    load_tile<DQK>(sK + s * kBN * (DQK + kPad), kbase + int64_t{kv0} * a.k_stride, a.k_stride, kBN, len - kv0, a.dqk,
                   a.k);
    load_tile<DV>(sV + s * kBN * (DV + kPad), vbase + int64_t{kv0} * a.v_stride, a.v_stride, kBN, len - kv0, a.dv, a.v);
  };
  load_tile<DQK>(sQ, qbase, a.q_stride, kBM, len - q0, a.dqk, a.q);
  load_kv(0);
  cp_async_commit();
  if (num_tiles > 1) load_kv(1);
  cp_async_commit();

  uint32_t qf[DQK / 16][4];
  float o[DV / 8][4];
  for (int i = 0; i < DV / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  SoftmaxRows st;

  for (int t = 0; t < num_tiles; ++t) {
    // Tile t has landed (tile t + 1 may not have), and every warp is done with tile t - 1,
    // whose buffer tile t + 2 then fills.
    cp_async_wait<1>();
    __syncthreads();
    if (t + 2 < num_tiles) load_kv(t + 2);
    cp_async_commit();
    if (t == 0) {
      for (int kk = 0; kk < DQK / 16; ++kk)
        ldmatrix_x4(qf[kk], sQ + (warp * 16 + (lane % 16)) * (DQK + kPad) + kk * 16 + (lane / 16) * 8);
    }
    const int kv0 = k_begin + t * kBN;
    if (kv0 < warp_k_begin || kv0 > warp_k_last) continue;  // not among this warp's tiles
    const bf16* k_tile = sK + (t % kStages) * kBN * (DQK + kPad);
    const bf16* v_tile = sV + (t % kStages) * kBN * (DV + kPad);

    // S = Q K^T for this warp's 16 queries and the tile's 64 keys; n8 block j in s[4 j .. 4 j + 3].
    float s[32];
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    const auto block = [&](int j) -> float(&)[4] { return *reinterpret_cast<float(*)[4]>(&s[4 * j]); };
    for (int kk = 0; kk < DQK / 16; ++kk) {
      for (int j = 0; j < kBN / 16; ++j) {
        uint32_t b[4];
        const int m = lane / 8;
        ldmatrix_x4(b, k_tile + (j * 16 + (m / 2) * 8 + lane % 8) * (DQK + kPad) + kk * 16 + (m % 2) * 8);
        mma_bf16(block(2 * j), qf[kk], b[0], b[1]);
        mma_bf16(block(2 * j + 1), qf[kk], b[2], b[3]);
      }
    }
    float corr[2];
    online_softmax_tile(s, st, corr, kv0, rows, len, a.window, a.scale_log2);
    for (int i = 0; i < DV / 8; ++i) {
      o[i][0] *= corr[0];
      o[i][1] *= corr[0];
      o[i][2] *= corr[1];
      o[i][3] *= corr[1];
    }
    // O += P V: P's accumulators become A fragments directly.
    for (int kk = 0; kk < kBN / 16; ++kk) {
      uint32_t p[4];
      p[0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
      p[1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
      p[2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
      p[3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
      for (int i = 0; i < DV / 16; ++i) {
        uint32_t b[4];
        const int m = lane / 8;
        ldmatrix_x4_trans(b, v_tile + (kk * 16 + (m % 2) * 8 + lane % 8) * (DV + kPad) + i * 16 + (m / 2) * 8);
        mma_bf16(o[2 * i], p, b[0], b[1]);
        mma_bf16(o[2 * i + 1], p, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();

  const float inv_a = st.l_run[0] > 0.0f ? 1.0f / st.l_run[0] : 0.0f;
  const float inv_b = st.l_run[1] > 0.0f ? 1.0f / st.l_run[1] : 0.0f;
  const int row_a = rows.row_a, row_b = rows.row_b;
  bf16* obase = a.out + int64_t{start} * a.o_stride + int64_t{head} * a.dv;
  for (int i = 0; i < DV / 8; ++i) {
    const int col = i * 8 + 2 * c4;
    if (col >= a.dv) continue;
    if (row_a < len)
      *reinterpret_cast<uint32_t*>(obase + int64_t{row_a} * a.o_stride + col) = pack_bf16(o[i][0] * inv_a, o[i][1] * inv_a);
    if (row_b < len)
      *reinterpret_cast<uint32_t*>(obase + int64_t{row_b} * a.o_stride + col) = pack_bf16(o[i][2] * inv_b, o[i][3] * inv_b);
  }
}

template <int DQK, int DV>
void launch(const Args& a, int num_seqs, int heads, cudaStream_t s) {
  constexpr size_t bytes = smem_bytes<DQK, DV>();
  // Above 48 KiB of dynamic shared memory a kernel must opt in; a host-side call, no sync.
  E3_CUDA_CHECK(cudaFuncSetAttribute(flash_attention_kernel<DQK, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  const dim3 grid(static_cast<unsigned>(num_seqs * a.tiles_per_seq), static_cast<unsigned>(heads));
  flash_attention_kernel<DQK, DV><<<grid, kWarps * 32, bytes, s>>>(a);
  E3_CUDA_LAUNCH_CHECK("flash_attention");
}

}  // namespace

void attention(Tensor q, Tensor k, Tensor v, Tensor out, const AttentionParams& p, const SequenceLayout& seqs,
               bool wgmma, cudaStream_t s) {
  E3_REQUIRE(q.dtype == DType::BF16 && k.dtype == DType::BF16 && v.dtype == DType::BF16 && out.dtype == DType::BF16 &&
                 p.num_kv_heads > 0 && p.num_q_heads % p.num_kv_heads == 0 &&
                 q.cols == int64_t{p.num_q_heads} * p.qk_head_dim && k.cols == int64_t{p.num_kv_heads} * p.qk_head_dim &&
                 v.cols == int64_t{p.num_kv_heads} * p.v_head_dim && out.cols == int64_t{p.num_q_heads} * p.v_head_dim &&
                 q.rows == seqs.num_tokens && k.rows == q.rows && v.rows == q.rows && out.rows == q.rows,
             ErrorKind::Internal, "cuda attention: q {} k {} v {} out {}", q.shape_str(), k.shape_str(), v.shape_str(),
             out.shape_str());
  // 16-byte loads: every row start and head offset must stay 16-byte aligned.
  E3_REQUIRE(p.qk_head_dim % 8 == 0 && p.v_head_dim % 8 == 0 && q.stride % 8 == 0 && k.stride % 8 == 0 &&
                 v.stride % 8 == 0 && out.stride % 2 == 0,
             ErrorKind::Model, "the CUDA attention kernel needs head dims and row strides that are multiples of 8 "
             "(qk {}, v {})", p.qk_head_dim, p.v_head_dim);
  if (seqs.num_tokens == 0) return;
  if (wgmma && attention_wgmma_fits(p)) return attention_wgmma(q, k, v, out, p, seqs, s);
  const Args a = attention_args(q, k, v, out, p, seqs, kBM);
  const int dqk = p.qk_head_dim, dv = p.v_head_dim, heads = p.num_q_heads, n = seqs.num_seqs;
  // The smallest padded pair that holds the real dims.
  if (dqk <= 16 && dv <= 16) return launch<16, 16>(a, n, heads, s);
  if (dqk <= 32 && dv <= 16) return launch<32, 16>(a, n, heads, s);
  if (dqk <= 32 && dv <= 32) return launch<32, 32>(a, n, heads, s);
  if (dqk <= 48 && dv <= 32) return launch<48, 32>(a, n, heads, s);
  if (dqk <= 48 && dv <= 48) return launch<48, 48>(a, n, heads, s);
  if (dqk <= 64 && dv <= 64) return launch<64, 64>(a, n, heads, s);
  if (dqk <= 96 && dv <= 96) return launch<96, 96>(a, n, heads, s);
  if (dqk <= 128 && dv <= 128) return launch<128, 128>(a, n, heads, s);
  if (dqk <= 192 && dv <= 128) return launch<192, 128>(a, n, heads, s);
  E3_THROW(ErrorKind::Model, "the CUDA attention kernel supports head dims up to 192 (qk) / 128 (v), not {} / {}", dqk, dv);
}

}  // namespace e3::kernels::cuda
