// `eagle3_extract info MODEL`: the config as read, the default capture ids, and the memory
// one rank needs at a given TP size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/environment.h"

namespace e3::jobs {

struct InfoOptions {
  std::filesystem::path model_dir;
  int tp = 1;
  int64_t max_tokens_per_step = 16384;
  int64_t max_seq_len = 8192;
  double gpu_memory_gib = 0;  // when set, say whether a rank fits
  Environment env;            // the CUDA backend's options that change its memory (E3_MOE_UNFUSED)
};

// Returns the report as text (the app prints it).
std::string model_info(const InfoOptions& options);

}  // namespace e3::jobs
