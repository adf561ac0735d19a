#include "jobs/backend_select.h"

#include <thread>

#include "kernels/error.h"

namespace e3::jobs {

std::string resolve_backend(const std::string& requested) {
  if (requested == "cpu") return "cpu";
  if (requested == "cuda")
    E3_THROW(ErrorKind::Usage, "--backend cuda: this build of eagle3_extract has no CUDA backend");
  E3_REQUIRE(requested == "auto", ErrorKind::Usage, "--backend must be auto, cuda or cpu, not '{}'", requested);
  return "cpu";
}

std::unique_ptr<kernels::Backend> make_backend(const RunConfig& rc, const parallel::Grid& grid) {
  const std::string kind = resolve_backend(rc.backend);
  int threads = rc.threads;
  if (threads <= 0) {
    // Share the node's cores among the ranks on it.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, grid.local_size()));
  }
  return kernels::make_cpu_backend(threads);
}

}  // namespace e3::jobs
