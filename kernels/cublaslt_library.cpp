#include "kernels/cublaslt_library.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace e3::kernels::cuda {
namespace {

std::string library_name() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

// RTLD_NODELETE: the handle is never closed, and a second open finds the same library.
void* open_library() {
  void* handle = dlopen(library_name().c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle) {
    const char* why = dlerror();
    E3_THROW(ErrorKind::Internal, "cannot load cuBLASLt ({}), which the CUDA backend needs: {}", library_name(),
             why ? why : "no reason given");
  }
  return handle;
}

template <typename Fn>
void resolve(void* handle, const char* symbol, Fn& fn) {
  dlerror();
  fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
  if (fn) return;
  const char* why = dlerror();
  E3_THROW(ErrorKind::Internal, "{} has no {}: {}", library_name(), symbol, why ? why : "a null symbol");
}

}  // namespace

CublasLtLibrary::CublasLtLibrary() {
  void* handle = open_library();
  resolve(handle, "cublasLtCreate", create);
  resolve(handle, "cublasLtDestroy", destroy);
  resolve(handle, "cublasLtGetStatusString", status_string);
  resolve(handle, "cublasLtMatmul", matmul);
  resolve(handle, "cublasLtMatmulAlgoConfigGetAttribute", algo_config_get);
  resolve(handle, "cublasLtMatmulAlgoGetHeuristic", algo_heuristic);
  resolve(handle, "cublasLtMatmulDescCreate", desc_create);
  resolve(handle, "cublasLtMatmulDescDestroy", desc_destroy);
  resolve(handle, "cublasLtMatmulDescSetAttribute", desc_set);
  resolve(handle, "cublasLtMatmulPreferenceCreate", preference_create);
  resolve(handle, "cublasLtMatmulPreferenceDestroy", preference_destroy);
  resolve(handle, "cublasLtMatmulPreferenceSetAttribute", preference_set);
  resolve(handle, "cublasLtMatrixLayoutCreate", layout_create);
  resolve(handle, "cublasLtMatrixLayoutDestroy", layout_destroy);
  resolve(handle, "cublasLtMatrixLayoutSetAttribute", layout_set);
}

}  // namespace e3::kernels::cuda
