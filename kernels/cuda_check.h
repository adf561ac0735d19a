// Error checks of CUDA runtime calls, for host code in .cpp and .cu files alike.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define E3_CUDA_CHECK(call)                                                                          \
  do {                                                                                               \
    const cudaError_t e3_cuda_rc_ = (call);                                                          \
    if (e3_cuda_rc_ != cudaSuccess)                                                                  \
      E3_THROW(::e3::ErrorKind::Internal, "{} failed: {}", #call, cudaGetErrorString(e3_cuda_rc_)); \
  } while (0)

// After a kernel launch: a bad configuration shows up here, not at the next sync.
#define E3_CUDA_LAUNCH_CHECK(what) E3_CUDA_CHECK(cudaPeekAtLastError())
