// Everything a run needs, validated by the CLI before it reaches the job.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/environment.h"
#include "io/dataset.h"
#include "io/manifest.h"
#include "jobs/option_names.h"
#include "jobs/part.h"
#include "core/dtype.h"
#include "model/capture.h"

namespace e3::jobs {

// What a sample with NaN or infinity in its captured states does.
enum class OnNonfinite { Skip, Error };
inline constexpr NamedValue<OnNonfinite> kOnNonfiniteNames[] = {{OnNonfinite::Error, "error"},
                                                                {OnNonfinite::Skip, "skip"}};
constexpr const auto& name_table(OnNonfinite) { return kOnNonfiniteNames; }

// "2,16,29" -> {2, 16, 29}. Every comma-separated item must be one integer: an empty list or
// an empty item ("1,,2") is a usage error, not a silently dropped or zero id.
std::vector<int> parse_capture_ids(const std::string& text);

// "4G", "512MiB", "100k", "1048576" -> bytes (K, M, G and KiB, MiB, GiB are powers of 1024,
// the letter in either case). `option` names the option in the usage error for anything
// else: no digits, a fraction, another suffix, zero, or more than 2^63 bytes.
uint64_t parse_byte_size(const std::string& text, const char* option);

// The warning for `threads` CPU-backend threads on each of `ranks_on_node` ranks sharing
// `cores` cores, or nothing when they fit.
std::optional<std::string> threads_warning(int threads, int ranks_on_node, int cores);
// Threads for each writer rank's NaN/Inf scan and writes: `requested`, or else the node's cores
// shared among the ranks on it that write (TP rank 0 of each group), at most 8 (the page cache
// takes no more from one process).
int writer_thread_count(int requested, int cores, int ranks_on_node, int tp);

// Failures on purpose, for the tests that prove a failure ends the job cleanly. Read once,
// where the run config is built, from E3_FAIL_AT_SAMPLE=k [E3_FAIL_ON_RANK=r],
// E3_FAIL_PUBLISH_SHARD=s and E3_STEP_DELAY_MS=ms of the start-up environment; never set by users.
struct FaultInjection {
  int64_t fail_at_sample = -1;  // world rank `rank` fails before the step holding this sample
  int rank = 0;
  int64_t fail_publish_shard = -1;  // the writer's publisher thread throws a std::filesystem_error on it
  int64_t step_delay_ms = 0;  // E3_STEP_DELAY_MS: every rank's steps take this much longer (a slowed run)

  bool fails_before(int64_t sample, int world_rank) const {
    return fail_at_sample >= 0 && sample == fail_at_sample && world_rank == rank;
  }
};
// A value that is not a non-negative integer is a usage error naming the variable.
FaultInjection fault_injection_from(const Environment& env);

struct RunConfig {
  std::filesystem::path model_dir;
  std::filesystem::path data_path;
  std::filesystem::path tokenizer_dir;     // text lines: the tokenizer's directory; empty: model_dir
  std::filesystem::path chat_template;     // --chat-template FILE; empty: the tokenizer's own
  io::MaskMode mask = io::MaskMode::Assistant;
  std::filesystem::path out_dir;
  std::optional<std::vector<int>> layers;  // nullopt: the EAGLE-3 default [2, L/2, L-3]
  model::FinalMode final_mode = model::FinalMode::PostNorm;
  int tp = 0;                              // 0: all ranks
  BackendKind backend = BackendKind::Auto;
  CommKind comm = CommKind::Auto;
  double collective_timeout_s = 600.0;     // the watchdog's limit for one step
  DType dtype = DType::BF16;
  int64_t max_seq_len = 8192;
  io::OnLong on_long = io::OnLong::Skip;
  OnNonfinite on_nonfinite = OnNonfinite::Error;
  double max_skipped_fraction = 0.01;      // of the part's samples, left out for non-finite states
  int64_t max_tokens_per_step = 16384;
  int64_t samples_per_shard = 1000;       // an upper bound; --shard-size usually cuts first
  uint64_t shard_size = uint64_t{4} << 30;  // a shard's estimated bytes, at most (one larger sample excepted)
  LogLevel log_level = LogLevel::Info;
  std::filesystem::path log_dir;           // also write each rank's lines to a file here
  int threads = 0;                         // CPU backend threads per rank; 0: cores / ranks on the node
  int writer_threads = 0;                  // threads of each writer rank's scan and writes; 0: see writer_thread_count
  double progress_interval_s = 10.0;
  io::Part part;                           // --part I/P: this job's slice of the shards
  bool part_given = false;
  bool space_check = true;                 // refuse to start when --out lacks room for the output
  ExpertDequant expert_dequant = ExpertDequant::Gemm;
  bool resume_checksums = false;           // read committed shards back and compare their checksums
  FaultInjection faults;                   // tests only
  // The start-up environment: Slurm's job id for the lock file, its array task id for the
  // warning of a task without --part, the CUDA backend's options, the GPUs shown.
  Environment env;
};

}  // namespace e3::jobs
