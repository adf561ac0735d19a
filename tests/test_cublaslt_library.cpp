// cuBLASLt is opened at run time (kernels/cublaslt_library.h). Its entry points resolve, and
// answer, on any machine with the library, GPU or not: a CUDA build is never left with one that
// fails only when the first GEMM is planned on a GPU machine.
#include <gtest/gtest.h>

#if defined(E3_HAVE_CUDA)
#include <string>

#include "kernels/cublaslt_library.h"

namespace {

TEST(CublasLtLibrary, OpensAndEveryEntryPointAnswers) {
  const e3::kernels::cuda::CublasLtLibrary lt;
  EXPECT_EQ(std::string(lt.status_string(CUBLAS_STATUS_SUCCESS)), "success");
  EXPECT_EQ(std::string(lt.status_string(CUBLAS_STATUS_NOT_SUPPORTED)), "the requested functionality is not supported");
  // Descriptors need no GPU: a layout made, changed and read back through the opened library.
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(lt.layout_create(&layout, CUDA_R_16BF, 64, 32, 64), CUBLAS_STATUS_SUCCESS);
  const uint64_t cols = 48;
  EXPECT_EQ(lt.layout_set(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &cols, sizeof cols), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt.layout_destroy(layout), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(lt.desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t transpose = CUBLAS_OP_T;
  EXPECT_EQ(lt.desc_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt.desc_destroy(desc), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t preference = nullptr;
  ASSERT_EQ(lt.preference_create(&preference), CUBLAS_STATUS_SUCCESS);
  const uint64_t workspace = 1 << 20;
  EXPECT_EQ(lt.preference_set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt.preference_destroy(preference), CUBLAS_STATUS_SUCCESS);
  for (const void* entry : {reinterpret_cast<const void*>(lt.create), reinterpret_cast<const void*>(lt.destroy),
                            reinterpret_cast<const void*>(lt.matmul), reinterpret_cast<const void*>(lt.algo_heuristic),
                            reinterpret_cast<const void*>(lt.algo_config_get)})
    EXPECT_NE(entry, nullptr);
}

// A second open finds the library already loaded and the same entry points.
TEST(CublasLtLibrary, OpeningTwiceGivesTheSameEntryPoints) {
  const e3::kernels::cuda::CublasLtLibrary first, second;
  EXPECT_EQ(first.matmul, second.matmul);
  EXPECT_EQ(first.status_string, second.status_string);
}

}  // namespace
#endif
