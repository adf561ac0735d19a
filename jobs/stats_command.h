// `eagle3_extract stats DIR` over the ranks of a job: each rank reads its share of the shard
// files as verify does, rank 0 combines the partials in shard order and reports.
#pragma once

#include <filesystem>

#include "parallel/mpi_env.h"

namespace e3::jobs {

struct StatsCommandOptions {
  std::filesystem::path dir;
  std::filesystem::path svg = "stats.svg";  // --svg: the figures (never inside DIR)
  std::filesystem::path json;               // --json: the figures machine-readable; empty: none
  int threads = 0;                          // --threads: shards read at once (0: the node's cores / its ranks)
};

// Rank 0 prints the table on stdout, writes the SVG (and the JSON) under temporary names
// renamed when whole, and logs how long the reading took; every rank returns the same exit
// code (6 for a damaged shard or a directory that is not an output, as verify).
int run_stats(const StatsCommandOptions& o, const parallel::MpiEnv& mpi);

}  // namespace e3::jobs
