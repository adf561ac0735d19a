// Checks, on one warpgroup, the two wgmma forms the Hopper attention kernel is built on, against
// a CPU product: S = Q K^T (Q and K K-major in the 128 B swizzle) and O = P V (P as fragments, V N-major in the 128 B swizzle, 128 columns: two 64-column
// blocks). The N-major descriptor is tried as the kernel builds it (8-key groups in the stride
// offset, column blocks in the leading offset) and with the two offsets swapped, so that a
// failing attention test can be told apart from a wrong descriptor in one device call.
//   nvcc -std=c++17 -I. --generate-code=arch=compute_90a,code=sm_90a tests/gpu/wgmma_probe.cu -lfmt
#include <cmath>
#include <cstdio>
#include <vector>

#include "kernels/wgmma_sm90.cuh"

using namespace e3::kernels::cuda;
using namespace e3::kernels::cuda::sm90;

__global__ void probe(const bf16* q, const bf16* k, const bf16* v, float* s_out, float* o_out, int swap) {
#ifdef E3_WGMMA
  __shared__ alignas(1024) unsigned char sq[64 * 128], sk[64 * 128], sv[2 * 64 * 128];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, c4 = lane % 4;
  // q, k: [64][64], v: [64 keys][128]; all into 64-column swizzled blocks.
  for (int i = tid; i < 64 * 8; i += 128) {
    const int r = i / 8, c = i % 8;
    *reinterpret_cast<uint4*>(sq + sw128_offset(r, c)) = *reinterpret_cast<const uint4*>(q + r * 64 + c * 8);
    *reinterpret_cast<uint4*>(sk + sw128_offset(r, c)) = *reinterpret_cast<const uint4*>(k + r * 64 + c * 8);
  }
  for (int i = tid; i < 64 * 16; i += 128) {
    const int r = i / 16, c = i % 16;
    *reinterpret_cast<uint4*>(sv + (c / 8) * 8192 + sw128_offset(r, c % 8)) =
        *reinterpret_cast<const uint4*>(v + r * 128 + c * 8);
  }
  fence_async_shared();
  __syncthreads();
  float s[32] = {};
  wgmma_fence();
  for (int kk = 0; kk < 4; ++kk)
    wgmma_m64n64k16(s, sw128_desc(smem_addr(sq) + kk * 32), sw128_desc(smem_addr(sk) + kk * 32));
  wgmma_commit();
  wgmma_wait<0>();
  for (int i = 0; i < 32; ++i) fence_operand(s[i]);
  for (int i = 0; i < 32; ++i) {
    const int row = warp * 16 + g + 8 * ((i >> 1) & 1), col = (i / 4) * 8 + 2 * c4 + (i & 1);
    s_out[row * 64 + col] = s[i];
  }
  // P = S rounded to bf16, as the attention kernel packs it.
  uint32_t p[4][4];
  for (int kk = 0; kk < 4; ++kk)
    for (int j = 0; j < 4; ++j) p[kk][j] = pack_bf16(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
  float o[64] = {};
  wgmma_fence();
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t addr = smem_addr(sv) + kk * 16 * 128;
    uint64_t d = sw128_nmajor_desc(addr, 8192);
    if (swap) d = (uint64_t{(addr & 0x3FFFFu) >> 4}) | (uint64_t{1024 >> 4} << 16) | (uint64_t{8192 >> 4} << 32) | (uint64_t{1} << 62);
    wgmma_m64n128k16_rs_nmajor(o, p[kk], d);
  }
  wgmma_commit();
  wgmma_wait<0>();
  for (int i = 0; i < 64; ++i) fence_operand(o[i]);
  for (int i = 0; i < 64; ++i) {
    const int row = warp * 16 + g + 8 * ((i >> 1) & 1), col = (i / 4) * 8 + 2 * c4 + (i & 1);
    o_out[row * 128 + col] = o[i];
  }
#endif
}

static float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

int main() {
  std::vector<float> qf(64 * 64), kf(64 * 64), vf(64 * 128);
  unsigned seed = 1;
  auto rnd = [&] { seed = seed * 1664525u + 1013904223u; return bf(((seed >> 8) & 0xFFFF) / 32768.0f - 1.0f); };
  for (float& x : qf) x = rnd();
  for (float& x : kf) x = rnd();
  for (float& x : vf) x = rnd();
  std::vector<bf16> qb(qf.size()), kb(kf.size()), vb(vf.size());
  for (size_t i = 0; i < qf.size(); ++i) qb[i] = __float2bfloat16_rn(qf[i]);
  for (size_t i = 0; i < kf.size(); ++i) kb[i] = __float2bfloat16_rn(kf[i]);
  for (size_t i = 0; i < vf.size(); ++i) vb[i] = __float2bfloat16_rn(vf[i]);
  std::vector<float> s_ref(64 * 64), o_ref(64 * 128, 0.0f);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) {
      double acc = 0;
      for (int x = 0; x < 64; ++x) acc += double{qf[r * 64 + x]} * kf[c * 64 + x];
      s_ref[r * 64 + c] = static_cast<float>(acc);
    }
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 128; ++c) {
      double acc = 0;
      for (int x = 0; x < 64; ++x) acc += double{bf(s_ref[r * 64 + x])} * vf[x * 128 + c];
      o_ref[r * 128 + c] = static_cast<float>(acc);
    }
  bf16 *dq, *dk, *dv;
  float *ds, *dout;
  cudaMalloc(&dq, qb.size() * 2);
  cudaMalloc(&dk, kb.size() * 2);
  cudaMalloc(&dv, vb.size() * 2);
  cudaMalloc(&ds, 64 * 64 * 4);
  cudaMalloc(&dout, 64 * 128 * 4);
  cudaMemcpy(dq, qb.data(), qb.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, kb.data(), kb.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, vb.data(), vb.size() * 2, cudaMemcpyHostToDevice);
  int bad = 0;
  for (int swap = 0; swap < 2; ++swap) {
    cudaMemset(ds, 0xFF, 64 * 64 * 4);
    cudaMemset(dout, 0xFF, 64 * 128 * 4);
    probe<<<1, 128>>>(dq, dk, dv, ds, dout, swap);
    const cudaError_t rc = cudaDeviceSynchronize();
    std::vector<float> s(64 * 64), o(64 * 128);
    cudaMemcpy(s.data(), ds, s.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(o.data(), dout, o.size() * 4, cudaMemcpyDeviceToHost);
    auto rel = [](const std::vector<float>& a, const std::vector<float>& b) -> double {
      double n = 0, d = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        n += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
        d += double{b[i]} * b[i];
      }
      return std::sqrt(n / d);
    };
    const double es = rel(s, s_ref), eo = rel(o, o_ref);
    std::printf("wgmma probe: %s; S = Q K^T rel err %.2e; O = P V (N-major, %s) rel err %.2e\n",
                cudaGetErrorString(rc), es, swap ? "offsets swapped" : "as the kernel builds it", eo);
    if (!swap && !(es < 1e-3 && eo < 1e-2)) bad = 1;
  }
  return bad;
}
