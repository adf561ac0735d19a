// Not a test: how fast the tokenizer encodes (with offsets), on one thread and on N threads at
// once over the same tokenizer. The corpus is JSONL ({"text": ...}); each thread encodes all of it
// `--repeat` times; `--max-bytes B` leaves out texts longer than B bytes (the stress cases of the
// test corpus: 10,000-character words). Prints MB/s of UTF-8 input (10^6 bytes per second).
//   tokenizer_bench TOKENIZER_DIR CORPUS.jsonl [--threads N] [--repeat R] [--max-bytes B]
#include <chrono>
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

double run(const e3::tok::Tokenizer& tok, const std::vector<std::string>& texts, int threads, int repeat,
           size_t* tokens_out) {
  std::vector<size_t> tokens(static_cast<size_t>(threads), 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int r = 0; r < repeat; ++r)
        for (const auto& s : texts) tokens[static_cast<size_t>(t)] += tok.encode(s, true).size();
    });
  }
  for (auto& th : pool) th.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *tokens_out = tokens[0];
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR CORPUS.jsonl [--threads N] [--repeat R]\n", argv[0]);
    return 2;
  }
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  int repeat = 3;
  size_t max_bytes = SIZE_MAX;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--max-bytes") == 0) max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--repeat") == 0) repeat = std::atoi(argv[i + 1]);
  }
  try {
    const auto t_load = std::chrono::steady_clock::now();
    const auto tok = e3::tok::Tokenizer::load(argv[1]);
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
    size_t tokens = 0;
    run(tok, texts, 1, 1, &tokens);  // warm-up: caches and pages
    const double one = run(tok, texts, 1, repeat, &tokens);
    const double mb = static_cast<double>(bytes) * repeat / 1e6;
    std::printf("tokenizer %s: loaded in %.2f s; corpus %zu texts, %.2f MB, %zu tokens\n", argv[1], load_s,
                texts.size(), static_cast<double>(bytes) / 1e6, tokens / static_cast<size_t>(repeat));
    std::printf("1 thread: %.1f MB/s\n", mb / one);
    if (threads > 1) {
      const double many = run(tok, texts, threads, repeat, &tokens);
      std::printf("%d threads: %.1f MB/s in all, %.1f MB/s per thread\n", threads, mb * threads / many,
                  mb / many);
    }
  } catch (const e3::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return e3::exit_code(e.kind());
  }
  return 0;
}
