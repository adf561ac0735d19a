// `eagle3_extract verify DIR` over the ranks of a job: each rank checks its share of the shard
// files, rank 0 reports.
#pragma once

#include <filesystem>

#include "parallel/mpi_env.h"

namespace e3::jobs {

struct VerifyCommandOptions {
  std::filesystem::path dir;
  bool allow_incomplete = false;  // --allow-incomplete: a partial run passes
  int threads = 0;                // --threads: shards read at once (0: the node's cores / its ranks)
};

// Each rank reads the shard files whose index % ranks is its rank; rank 0 prints every problem
// found, one line each, then the summary, and every rank returns the same exit code. A failure
// is agreed on by a gather, never by MPI_Abort.
int run_verify(const VerifyCommandOptions& o, const parallel::MpiEnv& mpi);

}  // namespace e3::jobs
