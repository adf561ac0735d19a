#include "jobs/backend_select.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "kernels/error.h"

namespace e3::jobs {

std::string resolve_backend(const std::string& requested) {
  if (requested == "cpu") return "cpu";
  const int gpus = kernels::cuda_device_count();
  if (requested == "cuda") {
#ifndef E3_HAVE_CUDA
    E3_THROW(ErrorKind::Usage, "--backend cuda: this build of eagle3_extract has no CUDA backend");
#endif
    E3_REQUIRE(gpus > 0, ErrorKind::Usage, "--backend cuda: no GPU is visible to this process");
    return "cuda";
  }
  E3_REQUIRE(requested == "auto", ErrorKind::Usage, "--backend must be auto, cuda or cpu, not '{}'", requested);
  return gpus > 0 ? "cuda" : "cpu";
}

std::unique_ptr<kernels::Backend> make_backend(const RunConfig& rc, const parallel::Grid& grid) {
  if (resolve_backend(rc.backend) == "cuda")
    return kernels::make_cuda_backend(grid.local_rank() % kernels::cuda_device_count());
  int threads = rc.threads;
  if (threads <= 0) {
    // Share the node's cores among the ranks on it.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, grid.local_size()));
  }
  return kernels::make_cpu_backend(threads);
}

std::unique_ptr<parallel::Communicator> make_communicator(const RunConfig& rc, const parallel::Grid& grid,
                                                          kernels::Backend& backend) {
  E3_REQUIRE(rc.comm == "auto" || rc.comm == "nccl" || rc.comm == "mpi", ErrorKind::Usage,
             "--comm must be auto, nccl or mpi, not '{}'", rc.comm);
  const bool gpu = backend.name() == "cuda";
  const int gpus = kernels::cuda_device_count();
  const bool shared_gpu = gpu && grid.local_size() > gpus;
  if (rc.comm == "nccl") {
    E3_REQUIRE(gpu, ErrorKind::Usage, "--comm nccl needs the CUDA backend");
    E3_REQUIRE(!shared_gpu, ErrorKind::Usage,
               "--comm nccl needs one GPU per rank, but {} ranks on {} share {} GPU{}; use --comm mpi to share GPUs",
               grid.local_size(), grid.host(), gpus, gpus == 1 ? "" : "s");
    return parallel::make_nccl_communicator(grid.tp_comm(), backend);
  }
  if (rc.comm == "auto" && gpu && !shared_gpu && grid.tp_size() > 1)
    return parallel::make_nccl_communicator(grid.tp_comm(), backend);
  if (gpu && grid.tp_size() > 1 && grid.is_leader())
    spdlog::warn("tensor parallelism over MPI through host memory ({} ranks share {} GPU{} on {}): correct, but slow",
                 grid.local_size(), gpus, gpus == 1 ? "" : "s", grid.host());
  return parallel::make_mpi_communicator(grid.tp_comm(), backend);
}

}  // namespace e3::jobs
