// The extraction job: validate everything, plan, load the model slice, run packed prefill
// steps, audit the captures, write shards, and commit the manifest.
#pragma once

#include <functional>

#include "jobs/run_config.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

// Returns the process exit code. Throws e3::Error (or parallel::PeerFailed) on failure.
int run_extract(const RunConfig& config, const parallel::Grid& grid);

// Runs `setup` on every rank, then agrees on failure: the lowest failing rank rethrows its
// error marked agreed; the others throw parallel::PeerFailed. Every rank must call it.
void agreed_phase(const parallel::Grid& grid, const std::function<void()>& setup);

}  // namespace e3::jobs
