// Loads one rank's slice of a checkpoint N times and prints the time and GB/s of each load
// (bytes read from the checkpoint / seconds), to measure loading apart from extraction.
//   load_bench MODEL_DIR [--backend cpu|cuda] [--device D] [--tp N] [--rank R] [--load-threads T] [--repeat K]
// Run it twice in a row to measure from the page cache; drop the cache before it for cold reads.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "kernels/backend.h"
#include "core/error.h"
#include "model/model.h"
#include "model/weight_reader.h"

namespace {

// Loading needs the group's size and rank, never its collectives.
class NoCommunicator final : public e3::parallel::Communicator {
 public:
  NoCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "none"; }
  void all_reduce_sum(e3::kernels::Tensor) override { std::abort(); }

 private:
  int rank_, size_;
};

int usage() {
  fmt::print(stderr, "usage: load_bench MODEL_DIR [--backend cpu|cuda] [--device D] [--tp N] [--rank R] "
                     "[--load-threads T] [--repeat K]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string dir = argv[1];
  std::string backend_name = "cpu";
  int device = 0, tp = 1, rank = 0, threads = 0, repeat = 3;
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) return usage();
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--backend") backend_name = value;
    else if (key == "--device") device = std::atoi(value.c_str());
    else if (key == "--tp") tp = std::atoi(value.c_str());
    else if (key == "--rank") rank = std::atoi(value.c_str());
    else if (key == "--load-threads") threads = std::atoi(value.c_str());
    else if (key == "--repeat") repeat = std::atoi(value.c_str());
    else return usage();
  }
  try {
    using Clock = std::chrono::steady_clock;
    const e3::model::ModelConfig config = e3::model::load_model_config(dir);
    auto backend = backend_name == "cuda" ? e3::kernels::make_cuda_backend(device) : e3::kernels::make_cpu_backend(0);
    NoCommunicator comm(rank, tp);
    fmt::print("{} rank {}/{} on {}, {} load threads\n", dir, rank, tp, backend->device_description(),
               threads > 0 ? threads : e3::model::default_load_threads());
    for (int k = 0; k < repeat; ++k) {
      const auto t0 = Clock::now();
      const e3::model::Checkpoint ckpt(dir);
      auto model = e3::model::load_model(config, ckpt, *backend, comm, {rank, tp, 16, 16, threads});
      backend->synchronize();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      fmt::print("load {}: {:.3f} GB read in {:.3f} s: {:.2f} GB/s ({:.1f} MiB of weights)\n", k + 1,
                 ckpt.bytes_read() / 1e9, s, ckpt.bytes_read() / 1e9 / s, model->weight_bytes() / 1048576.0);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "load_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
