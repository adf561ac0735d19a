// y = x · wᵀ (+ bias) in fp32, written so that every output element is computed by the same
// sequence of roundings whatever the other rows of x are.
//
// Why not a BLAS: a BLAS picks its kernel by CPU and by problem size. OpenBLAS gives a row of
// x different low bits depending on how many rows share the call (the tile that row falls in,
// the small-matrix and GEMV paths, the thread split), so a sample's hidden states changed with
// the samples packed beside it, and a resumed run differed from an uninterrupted one. Here
// each element is one dot product with eight running partial sums over k (lane j holds the
// products of k ≡ j mod 8), added up in a fixed order, then the leftover k, then the bias.
// Multiplies and adds stay separate IEEE operations (no FMA contraction: the build compiles in
// ISO mode, which turns it off, and the AVX2 variant does not enable FMA), so the SSE2 and
// AVX2 variants give the same bits; register tiling only changes which elements are computed
// together, never how one is computed.
#pragma GCC diagnostic ignored "-Wpsabi"  // the eight-float type only ever lives inside this file

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/ops_cpu.h"

namespace e3::kernels::cpu {
namespace {

typedef float Lanes __attribute__((vector_size(32)));  // eight floats: SSE2 uses two registers

[[gnu::always_inline]] inline Lanes load_lanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);  // rows need not be 32-byte aligned
  return v;
}

[[gnu::always_inline]] inline float sum_lanes(Lanes a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

struct GemmArgs {
  const float* x;
  int64_t x_stride;
  const float* w;
  int64_t w_stride;
  const float* bias;  // nullptr: none
  float* y;
  int64_t y_stride;
  int64_t k;
};

// R rows of x against C rows of w, over the whole of k.
template <int R, int C>
[[gnu::always_inline]] inline void dot_block(const GemmArgs& a, int64_t row, int64_t col) {
  const float* xr[R];
  const float* wc[C];
  for (int r = 0; r < R; ++r) xr[r] = a.x + (row + r) * a.x_stride;
  for (int c = 0; c < C; ++c) wc[c] = a.w + (col + c) * a.w_stride;
  Lanes acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = Lanes{};
  const int64_t k8 = a.k / 8 * 8;
  for (int64_t k = 0; k < k8; k += 8) {
    Lanes xv[R];
    for (int r = 0; r < R; ++r) xv[r] = load_lanes(xr[r] + k);
    for (int c = 0; c < C; ++c) {
      const Lanes wv = load_lanes(wc[c] + k);
      for (int r = 0; r < R; ++r) acc[r][c] += xv[r] * wv;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float s = sum_lanes(acc[r][c]);
      float tail = 0.0f;
      for (int64_t k = k8; k < a.k; ++k) tail += xr[r][k] * wc[c][k];
      s += tail;
      if (a.bias) s += a.bias[col + c];
      a.y[(row + r) * a.y_stride + col + c] = s;
    }
}

// One tile of rows [r0, r1) x columns [c0, c1) in R x C register blocks, edges in smaller ones.
template <int R, int C>
[[gnu::always_inline]] inline void tile(const GemmArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  int64_t c = c0;
  for (; c + C <= c1; c += C) {
    int64_t r = r0;
    for (; r + R <= r1; r += R) dot_block<R, C>(a, r, c);
    for (; r < r1; ++r) dot_block<1, C>(a, r, c);
  }
  for (; c < c1; ++c) {
    int64_t r = r0;
    for (; r + R <= r1; r += R) dot_block<R, 1>(a, r, c);
    for (; r < r1; ++r) dot_block<1, 1>(a, r, c);
  }
}

// 2x4 blocks hold eight accumulators: sixteen AVX registers with the operands. SSE2 has half
// the registers' width, so it takes 2x2.
__attribute__((target("avx2"))) void tile_avx2(const GemmArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  tile<2, 4>(a, r0, r1, c0, c1);
}
void tile_sse2(const GemmArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) { tile<2, 2>(a, r0, r1, c0, c1); }

using TileFn = void (*)(const GemmArgs&, int64_t, int64_t, int64_t, int64_t);

// Tiles small enough that a tile's rows of w and x stay in L2 while it is computed.
void gemm_tiles(TileFn tile_fn, const GemmArgs& a, int64_t m, int64_t n) {
  constexpr int64_t kTileRows = 32, kTileCols = 32;
  const int64_t row_tiles = (m + kTileRows - 1) / kTileRows, col_tiles = (n + kTileCols - 1) / kTileCols;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t ct = 0; ct < col_tiles; ++ct)
    for (int64_t rt = 0; rt < row_tiles; ++rt)
      tile_fn(a, rt * kTileRows, std::min(m, (rt + 1) * kTileRows), ct * kTileCols, std::min(n, (ct + 1) * kTileCols));
}

}  // namespace

void linear(Tensor x, Tensor w, const Tensor* bias, Tensor y) {
  require_f32(x, "linear x");
  require_f32(w, "linear w");
  require_f32(y, "linear y");
  E3_REQUIRE(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows, ErrorKind::Internal,
             "linear: x {} w {} y {}", x.shape_str(), w.shape_str(), y.shape_str());
  if (bias) {
    require_f32(*bias, "linear bias");
    E3_REQUIRE(bias->numel() == y.cols, ErrorKind::Internal, "linear bias {} for y {}", bias->shape_str(),
               y.shape_str());
  }
  if (x.rows == 0 || y.cols == 0) return;
  const GemmArgs a{x.as<float>(), x.stride, w.as<float>(), w.stride, bias ? bias->as<float>() : nullptr,
                   y.as<float>(), y.stride,  x.cols};
  gemm_tiles(__builtin_cpu_supports("avx2") ? tile_avx2 : tile_sse2, a, x.rows, y.cols);
}

}  // namespace e3::kernels::cpu
