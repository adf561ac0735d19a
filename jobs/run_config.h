// Everything a run needs, validated by the CLI before it reaches the job.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "io/dataset.h"
#include "kernels/dtype.h"
#include "model/capture.h"

namespace e3::jobs {

struct RunConfig {
  std::filesystem::path model_dir;
  std::filesystem::path data_path;
  std::filesystem::path out_dir;
  std::optional<std::vector<int>> layers;  // nullopt: the EAGLE-3 default [2, L/2, L-3]
  model::FinalMode final_mode = model::FinalMode::PostNorm;
  int tp = 0;                              // 0: all ranks
  std::string backend = "auto";            // auto | cuda | cpu
  std::string comm = "auto";               // auto | nccl | mpi
  double collective_timeout_s = 600.0;     // the watchdog's limit for one step
  kernels::DType dtype = kernels::DType::BF16;
  int64_t max_seq_len = 8192;
  io::OnLong on_long = io::OnLong::Skip;
  int64_t max_tokens_per_step = 16384;
  int64_t samples_per_shard = 1000;
  std::string log_level = "info";
  int threads = 0;                         // CPU backend threads per rank; 0: cores / ranks on the node
  double progress_interval_s = 10.0;
};

}  // namespace e3::jobs
