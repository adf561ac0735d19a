// Not a test: how fast the tokenizer encodes (with offsets), on one thread and on N threads at
// once over the same tokenizer. The corpus is JSONL ({"text": ...}); each thread encodes all of it
// as many times as make `--min-mb` MB (default 20); `--max-bytes B` leaves out texts longer than B
// bytes (the stress cases of the test corpus: 10,000-character words). Prints MB/s of UTF-8 input
// (10^6 bytes per second) by the wall clock and per core by each thread's CPU time (the figure
// that holds on a machine shared with other work). The corpus repeats, so after the first pass
// every word under 256 bytes is in each thread's word cache: `--no-cache` turns the cache off (every
// word split anew, the worst case of text that never repeats a word), `--ids` times encode_ids
// (no offsets) instead of encode.
//   tokenizer_bench TOKENIZER_DIR CORPUS.jsonl [--threads N] [--min-mb M] [--max-bytes B] [--no-cache] [--ids]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/tokenizer/tokenizer.h"

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Timing {
  double wall = 0, cpu = 0;  // cpu: summed over the threads
  size_t tokens = 0;         // of one pass
};

bool g_ids = false;  // time encode_ids

size_t encode_count(const e3::tok::Tokenizer& tok, const std::string& s) {
  return g_ids ? tok.encode_ids(s, true).size() : tok.encode(s, true).size();
}

Timing run(const e3::tok::Tokenizer& tok, const std::vector<std::string>& texts, int threads, int repeat) {
  std::vector<size_t> tokens(static_cast<size_t>(threads), 0);
  std::vector<double> cpu(static_cast<size_t>(threads), 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const double c0 = thread_cpu_seconds();
      for (int r = 0; r < repeat; ++r)
        for (const auto& s : texts) tokens[static_cast<size_t>(t)] += encode_count(tok, s);
      cpu[static_cast<size_t>(t)] = thread_cpu_seconds() - c0;
    });
  }
  for (auto& th : pool) th.join();
  Timing out;
  out.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (double c : cpu) out.cpu += c;
  out.tokens = tokens[0] / static_cast<size_t>(repeat);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR CORPUS.jsonl [--threads N] [--min-mb M] [--max-bytes B] [--no-cache] [--ids]\n",
                 argv[0]);
    return 2;
  }
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  double min_mb = 20;
  size_t max_bytes = SIZE_MAX;
  e3::tok::LoadOptions options;
  for (int i = 3; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--no-cache") == 0) options.word_cache = false;
    if (std::strcmp(argv[i], "--ids") == 0) g_ids = true;
    if (has_value && std::strcmp(argv[i], "--max-bytes") == 0) max_bytes = std::strtoull(argv[++i], nullptr, 10);
    if (has_value && std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[++i]);
    if (has_value && std::strcmp(argv[i], "--min-mb") == 0) min_mb = std::atof(argv[++i]);
  }
  try {
    const auto t_load = std::chrono::steady_clock::now();
    const auto tok = e3::tok::Tokenizer::load(argv[1], options);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
    std::vector<std::string> texts;
    std::ifstream in(argv[2]);
    std::string line;
    size_t bytes = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto text = nlohmann::json::parse(line).at("text").get<std::string>();
      if (text.size() > max_bytes) continue;
      bytes += text.size();
      texts.push_back(std::move(text));
    }
    if (bytes == 0) {
      std::fprintf(stderr, "%s: no text\n", argv[2]);
      return 2;
    }
    const int repeat = std::max(1, static_cast<int>(std::ceil(min_mb * 1e6 / static_cast<double>(bytes))));
    run(tok, texts, 1, 1);  // warm-up: caches and pages
    const Timing one = run(tok, texts, 1, repeat);
    const double mb = static_cast<double>(bytes) * repeat / 1e6;
    std::printf("tokenizer %s: loaded in %.2f s; corpus %zu texts, %.3f MB x %d = %.1f MB per thread, %zu tokens a pass; "
                "%s, word cache %s\n",
                argv[1], load_s, texts.size(), static_cast<double>(bytes) / 1e6, repeat, mb, one.tokens,
                g_ids ? "encode_ids" : "encode", options.word_cache ? "on" : "off");
    std::printf("1 thread: %.1f MB/s wall, %.1f MB/s per core (CPU time)\n", mb / one.wall, mb / one.cpu);
    if (threads > 1) {
      const Timing many = run(tok, texts, threads, repeat);
      std::printf("%d threads: %.1f MB/s wall in all, %.1f MB/s per core (CPU time)\n", threads,
                  mb * threads / many.wall, mb * threads / many.cpu);
    }
  } catch (const e3::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e3::exit_code(e.kind());
  }
  return 0;
}
