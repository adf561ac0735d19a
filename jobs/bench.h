// `eagle3_extract bench`: tokens/s, achieved TFLOP/s and MFU of a model shape with random
// weights (no checkpoint), against a bf16 matmul ceiling measured in the same run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/dtype.h"
#include "core/environment.h"
#include "jobs/option_names.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

struct BenchOptions {
  std::filesystem::path config;  // a config.json
  int batch = 8;
  int64_t seq = 2048;
  int iters = 5;
  int warmup = 2;
  int64_t num_layers = 0;        // > 0: override num_hidden_layers
  BackendKind backend = BackendKind::Auto;
  CommKind comm = CommKind::Auto;
  ExpertDequant expert_dequant = ExpertDequant::Gemm;  // as for a run
  std::filesystem::path out;     // when set, also time end to end with HDF5 shards written here
  DType dtype = DType::BF16;     // the storage dtype of the shards written under `out`
  Environment env;               // the start-up environment: the CUDA backend's options (E3_PROFILE...)
};

// FLOPs per token of a prefill of `seq` tokens, counted as shared/bench/hf_baseline.py counts
// them (2 x active matmul parameters + causal attention), so that MFU figures compare.
double flops_per_token(const std::filesystem::path& config, int64_t num_layers, int64_t seq);

int run_bench(const BenchOptions& options, const parallel::Grid& grid);

}  // namespace e3::jobs
