// Chooses and creates the compute backend for --backend auto|cuda|cpu.
#pragma once

#include <memory>

#include "jobs/run_config.h"
#include "kernels/backend.h"
#include "parallel/communicator.h"
#include "parallel/mpi_env.h"

namespace e3::jobs {

// The name of the backend --backend resolves to on this machine ("cpu" or "cuda").
std::string resolve_backend(BackendKind requested);
// Usage errors of --backend and --comm together, found without creating anything.
void check_backend_options(const RunConfig& rc);
// CPU: threads shared among the node's ranks. CUDA: GPU local_rank % visible GPUs.
std::unique_ptr<kernels::Backend> make_backend(const RunConfig& rc, const parallel::Grid& grid);
// The TP group's communicator: NCCL when every rank of the node has its own GPU (or when
// asked for; refused when ranks share a GPU), else MPI.
std::unique_ptr<parallel::Communicator> make_communicator(const RunConfig& rc, const parallel::Grid& grid,
                                                          kernels::Backend& backend);

}  // namespace e3::jobs
