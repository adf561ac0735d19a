// Which half of L2 each SM sits beside (issue 21 item 4; docs/PERFORMANCE.md, thirteenth session).
// An H100's L2 is two partitions joined by a link, and the expert GEMM's weight slabs crossing
// that link bound it (ncu, call 42). A line's home is one partition; an SM whose partition is the
// other one pays the crossing. So the SMs of one side agree on which lines are slow from device
// memory, and the two sides disagree: each SM in turn times the same cold lines (one dependent
// load at a time, L2 emptied before each turn), and its latencies correlate positively with the
// first SM's when it shares its side, negatively when it does not.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda_common.cuh"
#include "kernels/backend.h"

namespace e3::kernels {
namespace {
constexpr int kLines = 128;
constexpr size_t kLineStride = 4096;  // one probe line per 4 KiB, spread over L2's address hash
constexpr int kThreads = 256;

__device__ __forceinline__ unsigned sm_id() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(s));
  return s;
}

// Each block records its SM; the shared memory it asks for keeps a second block off that SM.
__global__ void which_sm_kernel(unsigned* sm_of_block) {
  if (threadIdx.x == 0) sm_of_block[blockIdx.x] = sm_id();
}

// Reads `bytes` with the whole grid, so that whatever L2 held before is gone.
__global__ void sweep_kernel(const uint4* p, size_t n, unsigned long long* sink) {
  unsigned long long acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = p[i];
    acc += v.x ^ v.w;
  }
  if (acc == 0x9e3779b97f4a7c15ull) *sink = acc;  // never true: keeps the reads
}

// The block that landed on SM `target` times each probe line once, cold: the loads form one
// dependent chain (the next address adds the loaded zero), so one is in flight at a time. Its
// threads first touch another line of each 4 KiB, so that no probe load waits on a page walk.
__global__ void time_lines_kernel(const unsigned* probe, unsigned target, unsigned* cycles) {
  if (sm_id() != target) return;
  for (int i = threadIdx.x; i < kLines; i += blockDim.x) {
    unsigned v;
    asm volatile("ld.global.cg.u32 %0, [%1];\n"
                 : "=r"(v)
                 : "l"(probe + i * (kLineStride / 4) + kLineStride / 8)
                 : "memory");
    if (v == 0x9e3779b9u) cycles[0] = v;  // never true: keeps the load
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  unsigned dep = 0;
  for (int i = 0; i < kLines; ++i) {
    const unsigned* p = probe + i * (kLineStride / 4) + dep;
    long long t0, t1;
    unsigned v;
    asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t0)::"memory");
    asm volatile("ld.global.cg.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    asm volatile("add.u32 %0, %0, %1;\n" : "+r"(dep) : "r"(v));
    asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t1)::"memory");
    cycles[i] = static_cast<unsigned>(t1 - t0);
  }
}

double correlation(const unsigned* a, const unsigned* b) {
  double ma = 0, mb = 0;
  for (int i = 0; i < kLines; ++i) {
    ma += a[i];
    mb += b[i];
  }
  ma /= kLines;
  mb /= kLines;
  double ab = 0, aa = 0, bb = 0;
  for (int i = 0; i < kLines; ++i) {
    ab += (a[i] - ma) * (b[i] - mb);
    aa += (a[i] - ma) * (a[i] - ma);
    bb += (b[i] - mb) * (b[i] - mb);
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

}  // namespace

L2Sides find_l2_sides(int device) {
  E3_CUDA_CHECK(cudaSetDevice(device));
  int sms = 0, smem = 0, l2_bytes = 0;
  E3_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  E3_CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  E3_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  E3_CUDA_CHECK(cudaFuncSetAttribute(which_sm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  E3_CUDA_CHECK(cudaFuncSetAttribute(time_lines_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const size_t sweep_bytes = std::max<size_t>(size_t{3} * static_cast<size_t>(l2_bytes), size_t{64} << 20);
  const size_t probe_bytes = kLines * kLineStride;
  const size_t sm_bytes = sizeof(unsigned) * static_cast<size_t>(sms);
  const size_t cycles_bytes = sizeof(unsigned) * kLines * static_cast<size_t>(sms);
  char* buffer = nullptr;  // the sweep, the probe lines, the blocks' SMs, each turn's cycles
  E3_CUDA_CHECK(cudaMalloc(&buffer, sweep_bytes + probe_bytes + sm_bytes + cycles_bytes + 64));
  struct Free {
    char* p;
    ~Free() { cudaFree(p); }
  } free_buffer{buffer};
  auto* sweep = reinterpret_cast<const uint4*>(buffer);
  auto* probe = reinterpret_cast<unsigned*>(buffer + sweep_bytes);
  auto* sm_of_block = reinterpret_cast<unsigned*>(buffer + sweep_bytes + probe_bytes);
  auto* cycles = reinterpret_cast<unsigned*>(buffer + sweep_bytes + probe_bytes + sm_bytes);
  auto* sink = reinterpret_cast<unsigned long long*>(buffer + sweep_bytes + probe_bytes + sm_bytes + cycles_bytes);
  E3_CUDA_CHECK(cudaMemset(buffer, 0, sweep_bytes + probe_bytes + sm_bytes + cycles_bytes));

  which_sm_kernel<<<sms, 32, smem>>>(sm_of_block);
  E3_CUDA_LAUNCH_CHECK("find_l2_sides which_sm");
  std::vector<unsigned> sm(static_cast<size_t>(sms));
  E3_CUDA_CHECK(cudaMemcpy(sm.data(), sm_of_block, sm_bytes, cudaMemcpyDeviceToHost));
  std::sort(sm.begin(), sm.end());
  sm.erase(std::unique(sm.begin(), sm.end()), sm.end());
  for (size_t turn = 0; turn < sm.size(); ++turn) {
    sweep_kernel<<<sms * 4, kThreads>>>(sweep, sweep_bytes / sizeof(uint4), sink);
    time_lines_kernel<<<sms, kThreads, smem>>>(probe, sm[turn], cycles + turn * kLines);
  }
  E3_CUDA_LAUNCH_CHECK("find_l2_sides timing");
  std::vector<unsigned> host(kLines * sm.size());
  E3_CUDA_CHECK(cudaMemcpy(host.data(), cycles, sizeof(unsigned) * host.size(), cudaMemcpyDeviceToHost));

  L2Sides sides;
  sides.side_of_sm.assign(kL2SideSlots, 0);
  sides.weakest = 1.0;
  for (size_t turn = 0; turn < sm.size(); ++turn) {
    const double r = correlation(&host[turn * kLines], &host[0]);
    const int side = r < 0 ? 1 : 0;
    if (sm[turn] < kL2SideSlots) sides.side_of_sm[sm[turn]] = static_cast<uint8_t>(side);
    ++sides.sms[side];
    sides.weakest = std::min(sides.weakest, std::fabs(r));
  }
  // Both sides seen, and every SM clearly on one: otherwise the GPU shows no split this probe
  // can trust, and the walk stays as it is without sides.
  sides.found = sides.sms[0] > 0 && sides.sms[1] > 0 && sides.weakest >= 0.3;
  if (!sides.found) sides.side_of_sm.assign(kL2SideSlots, 0);
  return sides;
}

}  // namespace e3::kernels
