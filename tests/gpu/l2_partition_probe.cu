// Which of the two L2 partitions each SM of an H100 sits on, from load latency (issue 21 item 4;
// docs/PERFORMANCE.md, twelfth session: the link between the partitions bounds the expert GEMM, and
// a walk that keeps the blocks sharing a weight slab on one partition needs this map).
// Written in the twelfth session; first run in the thirteenth (call 45, after its clock fix).
//
// One block per SM (the shared memory keeps a second one out). The blocks take turns, so that one
// SM at a time loads. In its turn a block's first thread:
//   1. reads a 96 MiB buffer with all its threads, which drops the probe lines from both partitions;
//   2. times a dependent load of each probe line, served from device memory (cold);
//   3. times each line again, now an L2 hit (warm), keeping the lower of two passes.
// A line whose home is the far partition should cost the link's round trip on top: in the cold
// pass, and in the warm one unless the near partition keeps a copy. So the SMs of one partition
// should agree on which lines are slow, and the two partitions should disagree. The host sorts the
// SMs by how their slow lines agree with SM 0's and prints each SM's group.
//   nvcc -std=c++17 -O2 --generate-code=arch=compute_90,code=sm_90 tests/gpu/l2_partition_probe.cu -o l2_partition_probe
//   ./l2_partition_probe [lines, default 2048] > probe.txt
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e = (x);                                                                      \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

constexpr int kThreads = 1024;
constexpr size_t kStrideBytes = 4096;  // one probe line per 4 KiB: spread over the slices' hash
constexpr size_t kFlushBytes = size_t{96} << 20;

__device__ __forceinline__ unsigned load_cg(const unsigned* p) {
  unsigned v;
  asm volatile("ld.global.cg.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// The clock once v has arrived: predicated on a test of v, so that it cannot run before the load
// (a plain clock read after an add of v ran first and timed 2 cycles, call 44).
__device__ __forceinline__ long long clock_after(unsigned v) {
  long long t;
  asm volatile("{\n .reg .pred p;\n setp.eq.u32 p, %1, 0xffffffff;\n @p mov.u64 %0, 0;\n @!p mov.u64 %0, %%clock64;\n}\n"
               : "=l"(t)
               : "r"(v)
               : "memory");
  return t;
}
__device__ __forceinline__ unsigned sm_id() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(s));
  return s;
}

// The latency of each probe line from this SM, the dependent chain keeping one load in flight: the
// next address adds the loaded value (zero); the time between two clock reads is one load.
__device__ void time_lines(const unsigned* probe, int lines, unsigned short* out, bool keep_min) {
  unsigned dep = 0;
  long long before = clock_after(dep);
  for (int i = 0; i < lines; ++i) {
    const unsigned v = load_cg(probe + static_cast<size_t>(i) * (kStrideBytes / 4) + dep);
    const long long after = clock_after(v);
    const unsigned short c = static_cast<unsigned short>(min(after - before, 65535LL));
    before = after;
    dep += v;
    out[i] = keep_min ? min(out[i], c) : c;
  }
}

__global__ void probe_kernel(const unsigned* probe, int lines, const uint4* flush, unsigned* turn, unsigned* arrivals,
                             unsigned* sm_of_turn, unsigned short* cold, unsigned short* warm, unsigned long long* sink) {
  // The dynamic shared memory, unused, keeps a second block off the SM.
  __shared__ unsigned my_turn;
  if (threadIdx.x == 0) {
    my_turn = atomicAdd(arrivals, 1);
    while (atomicAdd(turn, 0) != my_turn) __nanosleep(1000);
  }
  __syncthreads();
  // 1. drop the probe lines from L2
  unsigned long long acc = 0;
  const size_t n = kFlushBytes / sizeof(uint4);
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
    const uint4 v = flush[i];
    acc += v.x ^ v.w;
  }
  if (acc == 0x9e3779b97f4a7c15ull) *sink = acc;  // keeps the reads
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned short* c = cold + static_cast<size_t>(my_turn) * lines;
    unsigned short* w = warm + static_cast<size_t>(my_turn) * lines;
    time_lines(probe, lines, c, false);  // 2. cold
    time_lines(probe, lines, w, false);  // 3. warm, twice
    time_lines(probe, lines, w, true);
    sm_of_turn[my_turn] = sm_id();
    __threadfence();
    atomicAdd(turn, 1);
  }
}

// The lines slower than this SM's median by `margin` cycles or more.
std::vector<char> slow_lines(const unsigned short* lat, int lines, int margin) {
  std::vector<unsigned short> sorted(lat, lat + lines);
  std::nth_element(sorted.begin(), sorted.begin() + lines / 2, sorted.end());
  const int median = sorted[lines / 2];
  std::vector<char> slow(lines);
  for (int i = 0; i < lines; ++i) slow[i] = lat[i] >= median + margin;
  return slow;
}

void report(const char* name, const std::vector<unsigned short>& lat, const std::vector<unsigned>& sm, int lines) {
  constexpr int kMargin = 40;
  const int blocks = static_cast<int>(sm.size());
  std::printf("== %s: per SM, median and 90th-percentile cycles, slow lines (>= median + %d), agreement with SM %u\n",
              name, kMargin, sm[0]);
  const std::vector<char> ref = slow_lines(&lat[0], lines, kMargin);
  std::vector<int> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return sm[a] < sm[b]; });
  for (int b : order) {
    const unsigned short* l = &lat[static_cast<size_t>(b) * lines];
    const std::vector<char> slow = slow_lines(l, lines, kMargin);
    int same = 0;
    for (int i = 0; i < lines; ++i) same += slow[i] == ref[i];
    const double agree = static_cast<double>(same) / lines;
    std::vector<unsigned short> sorted(l, l + lines);
    std::sort(sorted.begin(), sorted.end());
    std::printf("sm %3u median %5u p90 %5u slow %5.3f agree %5.3f group %c\n", sm[b], sorted[lines / 2],
                sorted[lines * 9 / 10], std::count(slow.begin(), slow.end(), 1) / static_cast<double>(lines), agree,
                agree >= 0.75 ? 'A' : agree <= 0.25 ? 'B' : '?');
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int lines = argc > 1 ? std::atoi(argv[1]) : 2048;
  int sms = 0, smem = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  smem -= 1024;  // room for the kernel's static shared memory within the opt-in limit
  CHECK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  unsigned *probe, *counters, *sm_of_turn;
  uint4* flush;
  unsigned short *cold, *warm;
  unsigned long long* sink;
  CHECK(cudaMalloc(&probe, lines * kStrideBytes));
  CHECK(cudaMemset(probe, 0, lines * kStrideBytes));
  CHECK(cudaMalloc(&flush, kFlushBytes));
  CHECK(cudaMemset(flush, 1, kFlushBytes));
  CHECK(cudaMalloc(&counters, 2 * sizeof(unsigned)));
  CHECK(cudaMemset(counters, 0, 2 * sizeof(unsigned)));
  CHECK(cudaMalloc(&sm_of_turn, sms * sizeof(unsigned)));
  CHECK(cudaMalloc(&cold, static_cast<size_t>(sms) * lines * 2));
  CHECK(cudaMalloc(&warm, static_cast<size_t>(sms) * lines * 2));
  CHECK(cudaMalloc(&sink, sizeof(unsigned long long)));
  // Every block must be resident at once for the turns to move: one per SM, sms of them.
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, probe_kernel, kThreads, smem));
  if (per_sm != 1) {
    std::fprintf(stderr, "expected one block per SM, got %d\n", per_sm);
    return 1;
  }
  probe_kernel<<<sms, kThreads, smem>>>(probe, lines, flush, counters, counters + 1, sm_of_turn, cold, warm, sink);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned> sm(sms);
  std::vector<unsigned short> c(static_cast<size_t>(sms) * lines), w(c.size());
  CHECK(cudaMemcpy(sm.data(), sm_of_turn, sms * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(c.data(), cold, c.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(w.data(), warm, w.size() * 2, cudaMemcpyDeviceToHost));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, %d probe lines %zu B apart\n", prop.name, sms, lines, kStrideBytes);
  report("cold (after the flush)", c, sm, lines);
  report("warm (L2 hits)", w, sm, lines);
  return 0;
}
