// Which half of L2 each SM sits beside (issue 21 item 4; docs/PERFORMANCE.md, thirteenth session).
// An H100's L2 is two partitions joined by a link, which the expert GEMM's weight slabs crossing
// it kept 90% busy (ncu, calls 42 and 45). A line's home is one partition; an SM whose partition is the
// other one pays the crossing. So the SMs of one side agree on which lines are slow from device
// memory, and the two sides disagree: each SM in turn times the same cold lines (one dependent
// load at a time, L2 emptied before each turn), and its latencies correlate positively with the
// first SM's when it shares its side, negatively when it does not (once what all SMs see alike
// is taken out).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda_common.cuh"

namespace e3::kernels {
namespace {
constexpr int kLines = 128;
constexpr int kTimes = 2 * kLines;  // per SM: each line cold, then warm
constexpr size_t kLineStride = 4096;  // one probe line per 4 KiB, spread over L2's address hash
constexpr int kThreads = 256;

__device__ __forceinline__ unsigned sm_id() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(s));
  return s;
}

// The clock, read once `v` has arrived: the read is predicated on a test of v, so no reordering
// can put it before the load that brings v (a plain read after an add of v was seen to run first,
// timing 2 cycles). Between two such reads lies one load's round trip and a few instructions.
__device__ __forceinline__ long long clock_after(unsigned v) {
  long long t;
  asm volatile(
      "{\n .reg .pred p;\n setp.eq.u32 p, %1, 0xffffffff;\n @p mov.u64 %0, 0;\n @!p mov.u64 %0, %%clock64;\n}\n"
      : "=l"(t)
      : "r"(v)
      : "memory");
  return t;
}

// Each block records its SM; the shared memory it asks for keeps a second block off that SM.
__global__ void which_sm_kernel(unsigned* sm_of_block) {
  if (threadIdx.x == 0) sm_of_block[blockIdx.x] = sm_id();
}

// Reads n 16-byte words with the whole grid, so that whatever L2 held before is gone.
__global__ void sweep_kernel(const uint4* p, size_t n, unsigned long long* sink) {
  unsigned long long acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = p[i];
    acc += v.x ^ v.w;
  }
  if (acc == 0x9e3779b97f4a7c15ull) *sink = acc;  // never true: keeps the reads
}

// The block that landed on SM `target` times each probe line cold, then again warm (an L2 hit,
// near or far: whether the near half keeps a copy of a far line shows here): the loads form one
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
  long long before = clock_after(dep);
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < kLines; ++i) {
      unsigned v;
      asm volatile("ld.global.cg.u32 %0, [%1];\n" : "=r"(v) : "l"(probe + i * (kLineStride / 4) + dep) : "memory");
      const long long after = clock_after(v);
      cycles[pass * kLines + i] = static_cast<unsigned>(after - before);
      before = after;
      dep += v;
    }
}

// x . y over the lines, both centred on their own means.
double centred_dot(const double* x, const double* y, int n) {
  double mx = 0, my = 0;
  for (int i = 0; i < n; ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= n;
  my /= n;
  double d = 0;
  for (int i = 0; i < n; ++i) d += (x[i] - mx) * (y[i] - my);
  return d;
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
  const size_t cycles_bytes = sizeof(unsigned) * kTimes * static_cast<size_t>(sms);
  const size_t bytes = sweep_bytes + probe_bytes + sm_bytes + cycles_bytes + 64;
  void* raw = nullptr;  // the sweep, the probe lines, the blocks' SMs, each turn's cycles
  E3_CUDA_CHECK(cudaMalloc(&raw, bytes));
  const DeviceBuffer owner(raw, bytes, [](void* p) { cudaFree(p); });
  char* buffer = static_cast<char*>(raw);
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
    time_lines_kernel<<<sms, kThreads, smem>>>(probe, sm[turn], cycles + turn * kTimes);
  }
  E3_CUDA_LAUNCH_CHECK("find_l2_sides timing");
  std::vector<unsigned> host(kTimes * sm.size());
  E3_CUDA_CHECK(cudaMemcpy(host.data(), cycles, sizeof(unsigned) * host.size(), cudaMemcpyDeviceToHost));

  // What every SM sees alike (device memory's own timing, the page walk) is taken out first: each
  // SM's latencies less the mean over all SMs, per line. What is left is the side's pattern, of
  // opposite sign on the two sides. Two-means from the first SM's residual: each SM goes to the
  // side its residual leans to, then along the difference of the sides' centroids (three rounds).
  const int n = static_cast<int>(sm.size());
  std::vector<double> residual(host.begin(), host.end()), mean(kTimes, 0.0);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < kTimes; ++i) mean[i] += residual[t * kTimes + i] / n;
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < kTimes; ++i) residual[t * kTimes + i] -= mean[i];
  std::vector<double> direction(residual.begin(), residual.begin() + kTimes);
  std::vector<int> side(static_cast<size_t>(n), 0);
  std::vector<double> score(static_cast<size_t>(n), 0.0);
  for (int round = 0; round < 3; ++round) {
    const double norm = std::sqrt(std::max(centred_dot(direction.data(), direction.data(), kTimes), 1e-30));
    for (int t = 0; t < n; ++t) {
      const double* r = &residual[static_cast<size_t>(t) * kTimes];
      const double rr = std::sqrt(std::max(centred_dot(r, r, kTimes), 1e-30));
      score[t] = centred_dot(r, direction.data(), kTimes) / (norm * rr);  // a correlation
      side[t] = score[t] < 0 ? 1 : 0;
    }
    std::vector<double> centroid[2] = {std::vector<double>(kTimes, 0.0), std::vector<double>(kTimes, 0.0)};
    int count[2] = {0, 0};
    for (int t = 0; t < n; ++t) {
      ++count[side[t]];
      for (int i = 0; i < kTimes; ++i) centroid[side[t]][i] += residual[t * kTimes + i];
    }
    if (count[0] == 0 || count[1] == 0) break;
    for (int i = 0; i < kTimes; ++i) direction[i] = centroid[0][i] / count[0] - centroid[1][i] / count[1];
  }
  L2Sides sides;
  sides.side_of_sm.assign(kL2SideSlots, 0);
  sides.weakest = 1.0;
  sides.sm_ids = sm;
  sides.cycles = host;
  sides.score = score;
  for (int t = 0; t < n; ++t) {
    if (sm[t] < static_cast<unsigned>(kL2SideSlots)) sides.side_of_sm[sm[t]] = static_cast<uint8_t>(side[t]);
    ++sides.sms[side[t]];
    sides.weakest = std::min(sides.weakest, std::fabs(score[t]));
  }
  // Both sides seen, and every SM clearly on one: otherwise the GPU shows no split this probe
  // can trust, and the walk stays as it is without sides.
  sides.found = sides.sms[0] > 0 && sides.sms[1] > 0 && sides.weakest >= 0.3;
  if (!sides.found) sides.side_of_sm.assign(kL2SideSlots, 0);
  return sides;
}

}  // namespace e3::kernels
