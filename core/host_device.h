// Marks functions that CUDA kernels call too, where a file is compiled by nvcc.
#pragma once

#ifdef __CUDACC__
#define E3_HOST_DEVICE __host__ __device__
#else
#define E3_HOST_DEVICE
#endif
