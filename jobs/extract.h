// The extraction job: validate everything, plan, load the model slice, run packed prefill
// steps, audit the captures, write shards, and commit the manifest. The phases are in
// jobs/extract_phases.h, the step loop in jobs/step_loop.h.
#pragma once

#include "jobs/run_config.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

// Returns the process exit code. Throws e3::Error (or parallel::PeerFailed) on failure.
int run_extract(const RunConfig& config, const parallel::Grid& grid);

}  // namespace e3::jobs
