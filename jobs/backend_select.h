// Chooses and creates the compute backend for --backend auto|cuda|cpu.
#pragma once

#include <memory>

#include "jobs/run_config.h"
#include "kernels/backend.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

// The name of the backend --backend resolves to on this machine ("cpu" or "cuda").
std::string resolve_backend(const std::string& requested);
std::unique_ptr<kernels::Backend> make_backend(const RunConfig& rc, const parallel::Grid& grid);

}  // namespace e3::jobs
