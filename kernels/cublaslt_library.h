// cuBLASLt opened when the first GEMM is made, not when the program starts.
//
// Linked normally, libcublasLt's static initialisers run before main in every process: 0.33 s
// on the 2-core build machine, about a tenth of a 7-s export and most of `--version`, for commands
// (export, verify, stats, tokenize) that never multiply a matrix. Opened here, only a CUDA forward
// pays for it, once.
#pragma once

#include <cublasLt.h>

namespace e3::kernels::cuda {

// The cuBLASLt entry points gemm_cuda.cpp calls, resolved from the library this build's
// headers belong to (libcublasLt.so.<CUBLAS_VER_MAJOR>). Move-only; the library stays loaded
// for the rest of the process (cuBLASLt registers exit handlers), so nothing is unloaded.
class CublasLtLibrary {
 public:
  // Throws an Internal error naming the library and dlopen's reason when it cannot be loaded or
  // lacks an entry point.
  CublasLtLibrary();
  CublasLtLibrary(CublasLtLibrary&&) noexcept = default;
  CublasLtLibrary& operator=(CublasLtLibrary&&) noexcept = default;
  CublasLtLibrary(const CublasLtLibrary&) = delete;
  CublasLtLibrary& operator=(const CublasLtLibrary&) = delete;

  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtGetStatusString) status_string = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
  decltype(&::cublasLtMatmulAlgoConfigGetAttribute) algo_config_get = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_heuristic = nullptr;
  decltype(&::cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&::cublasLtMatrixLayoutSetAttribute) layout_set = nullptr;
};

}  // namespace e3::kernels::cuda
