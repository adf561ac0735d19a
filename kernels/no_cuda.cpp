// The build without a CUDA toolkit: no GPUs, and a clear error if one is asked for.
#include "kernels/backend.h"
#include "core/error.h"

namespace e3::kernels {

int cuda_device_count() { return 0; }

L2Sides find_l2_sides(int) {
  E3_THROW(ErrorKind::Usage, "this build of eagle3_extract has no CUDA backend (CUDA toolkit not found at build time)");
}

const char* build_description() { return "CPU-only build: no CUDA backend"; }

std::unique_ptr<Backend> make_cuda_backend(int, const CudaOptions&) {
  E3_THROW(ErrorKind::Usage, "this build of eagle3_extract has no CUDA backend (CUDA toolkit not found at build time)");
}

}  // namespace e3::kernels
