#include "jobs/backend_select.h"

#include <spdlog/spdlog.h>

#include <set>
#include <thread>

#include "core/error.h"
#include "parallel/agreement.h"

namespace e3::jobs {

std::string resolve_backend(BackendKind requested) {
  if (requested == BackendKind::Cpu) return "cpu";
  const int gpus = kernels::cuda_device_count();
  if (requested == BackendKind::Cuda) {
#ifndef E3_HAVE_CUDA
    E3_THROW(ErrorKind::Usage, "--backend cuda: this build of eagle3_extract has no CUDA backend");
#endif
    E3_REQUIRE(gpus > 0, ErrorKind::Usage, "--backend cuda: no GPU is visible to this process");
    return "cuda";
  }
  return gpus > 0 ? "cuda" : "cpu";
}

void check_backend_options(const RunConfig& rc) {
  E3_REQUIRE(rc.comm != CommKind::Nccl || resolve_backend(rc.backend) == "cuda", ErrorKind::Usage,
             "--comm nccl needs the CUDA backend");
}

std::unique_ptr<kernels::Backend> make_backend(const RunConfig& rc, const parallel::Grid& grid) {
  check_backend_options(rc);
  if (resolve_backend(rc.backend) == "cuda") {
    auto be = kernels::make_cuda_backend(grid.local_rank() % kernels::cuda_device_count(),
                                         kernels::cuda_options_from(rc.env));
    be->set_quantized_experts_in_gemm(rc.expert_dequant == ExpertDequant::Gemm);
    return be;
  }
  int threads = rc.threads;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 0) {
    // Share the node's cores among the ranks on it.
    threads = std::max(1, cores / std::max(1, grid.local_size()));
  } else if (auto w = threads_warning(threads, std::max(1, grid.local_size()), cores)) {
    spdlog::warn("{}", *w);
  }
  return kernels::make_cpu_backend(threads);
}

namespace {

// Whether two ranks of this TP group drive the same physical GPU. Compared by host and PCI
// bus id, so a launcher that hides all but one GPU per task (srun --gpus-per-task=1, or
// CUDA_VISIBLE_DEVICES=$SLURM_LOCALID) counts as one GPU per rank.
bool tp_group_shares_a_gpu(const parallel::Grid& grid, const kernels::Backend& backend) {
  const std::vector<std::string> gpus = parallel::gather_to_all(grid.tp_comm(), grid.host() + "/" + backend.device_id());
  return std::set<std::string>(gpus.begin(), gpus.end()).size() < gpus.size();
}

}  // namespace

std::unique_ptr<parallel::Communicator> make_communicator(const RunConfig& rc, const parallel::Grid& grid,
                                                          kernels::Backend& backend) {
  const bool gpu = backend.name() == "cuda";
  const int gpus = kernels::cuda_device_count();
  const bool shared_gpu = gpu && tp_group_shares_a_gpu(grid, backend);
  if (rc.comm == CommKind::Nccl) {
    E3_REQUIRE(gpu, ErrorKind::Usage, "--comm nccl needs the CUDA backend");
    E3_REQUIRE(!shared_gpu, ErrorKind::Usage,
               "--comm nccl needs one GPU per rank, but ranks of a TP group share a GPU ({} ranks on {} see {} GPU{}); "
               "use --comm mpi to share GPUs",
               grid.local_size(), grid.host(), gpus, gpus == 1 ? "" : "s");
    return parallel::make_nccl_communicator(grid.tp_comm(), backend);
  }
  if (rc.comm == CommKind::Auto && gpu && !shared_gpu && grid.tp_size() > 1)
    return parallel::make_nccl_communicator(grid.tp_comm(), backend);
  if (gpu && grid.tp_size() > 1 && grid.is_leader())
    spdlog::warn("tensor parallelism over MPI through host memory ({} ranks see {} GPU{} on {}): correct, but slow",
                 grid.local_size(), gpus, gpus == 1 ? "" : "s", grid.host());
  return parallel::make_mpi_communicator(grid.tp_comm(), backend);
}

}  // namespace e3::jobs
