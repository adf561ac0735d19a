#include <algorithm>
#include <array>
#include <cstring>

#include "kernels/cublaslt_library.h"
#include "kernels/cuda_check.h"
#include "kernels/ops_cuda.h"

// `lt` is the CublasLtLibrary in scope whose entry point `call` uses.
#define E3_CUBLAS_CHECK(call)                                                                         \
  do {                                                                                                \
    const cublasStatus_t e3_blas_rc_ = (call);                                                        \
    if (e3_blas_rc_ != CUBLAS_STATUS_SUCCESS)                                                         \
      E3_THROW(::e3::ErrorKind::Internal, "{} failed: {}", #call, lt.status_string(e3_blas_rc_));      \
  } while (0)

namespace e3::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 64ull << 20;
constexpr size_t kPlanSlots = 4096;  // open addressing; a step uses a handful of shapes
// The token count every algorithm is chosen for. cuBLASLt's heuristic picks tiles and split-K by
// the problem's M, and a split-K kernel adds the partial sums of a row in an order set by the
// split: asked per token count, a sample's states would change with the samples packed beside it.
// One algorithm per weight shape, chosen for a full step and without split-K, computes every row
// the same way for any M (the default step budget, where it is also the fastest choice).
constexpr int64_t kPlanRows = 16384;

// Everything that decides which cuBLASLt algorithm is valid for a call, except M (see kPlanRows).
struct PlanKey {
  int64_t n = 0, k = 0, ldx = 0, ldw = 0, ldy = 0;
  int in_type = 0, out_type = 0, bias = 0, align = 0;
  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof *this) == 0; }
};

struct Plan {
  PlanKey key;
  bool used = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  int64_t layout_rows = 0;  // the M that layouts b and c describe now
};

// The largest power of two (up to 256) dividing every address and leading dimension.
int alignment(const void* x, const void* w, const void* y, const void* bias, int64_t ldx_b, int64_t ldw_b,
              int64_t ldy_b) {
  uint64_t bits = reinterpret_cast<uint64_t>(x) | reinterpret_cast<uint64_t>(w) | reinterpret_cast<uint64_t>(y) |
                  static_cast<uint64_t>(ldx_b) | static_cast<uint64_t>(ldw_b) | static_cast<uint64_t>(ldy_b) |
                  reinterpret_cast<uint64_t>(bias) | 256u;
  return static_cast<int>(bits & (~bits + 1));
}

}  // namespace

struct Gemm::Impl {
  CublasLtLibrary lt;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::array<Plan, kPlanSlots> plans{};

  Plan& plan_for(const PlanKey& key, cudaDataType_t in_type, cudaDataType_t out_type) {
    size_t h = 1469598103934665603ull;
    for (int64_t v : {key.n, key.k, key.ldx, key.ldw, key.ldy, int64_t{key.in_type}, int64_t{key.out_type},
                      int64_t{key.bias}, int64_t{key.align}})
      h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    for (size_t probe = 0; probe < kPlanSlots; ++probe) {
      Plan& p = plans[(h + probe) % kPlanSlots];
      if (p.used && p.key == key) return p;
      if (!p.used) {
        build(p, key, in_type, out_type);
        return p;
      }
    }
    E3_THROW(ErrorKind::Internal, "cuBLASLt plan cache is full ({} shapes)", kPlanSlots);
  }

  // Row-major y[M,N] = x[M,K] w[N,K]^T is column-major y^T = w x^T: A = w (transposed), B = x.
  void build(Plan& p, const PlanKey& key, cudaDataType_t in_type, cudaDataType_t out_type) {
    E3_CUBLAS_CHECK(lt.desc_create(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    E3_CUBLAS_CHECK(lt.desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    E3_CUBLAS_CHECK(lt.desc_set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (key.bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      E3_CUBLAS_CHECK(lt.desc_set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
      const cudaDataType_t bias_type = out_type;
      E3_CUBLAS_CHECK(
          lt.desc_set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    }
    E3_CUBLAS_CHECK(lt.layout_create(&p.a, in_type, static_cast<uint64_t>(key.k),
                                               static_cast<uint64_t>(key.n), key.ldw));
    E3_CUBLAS_CHECK(lt.layout_create(&p.b, in_type, static_cast<uint64_t>(key.k),
                                               static_cast<uint64_t>(kPlanRows), std::max(key.ldx, key.k)));
    E3_CUBLAS_CHECK(lt.layout_create(&p.c, out_type, static_cast<uint64_t>(key.n),
                                               static_cast<uint64_t>(kPlanRows), std::max(key.ldy, key.n)));
    p.layout_rows = kPlanRows;
    cublasLtMatmulPreference_t pref = nullptr;
    E3_CUBLAS_CHECK(lt.preference_create(&pref));
    const uint64_t ws = kWorkspaceBytes;
    E3_CUBLAS_CHECK(
        lt.preference_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const uint32_t no_split_k = CUBLASLT_REDUCTION_SCHEME_NONE;
    E3_CUBLAS_CHECK(lt.preference_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                         &no_split_k, sizeof no_split_k));
    const uint32_t align = static_cast<uint32_t>(key.align);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      E3_CUBLAS_CHECK(lt.preference_set(pref, attr, &align, sizeof align));
    std::array<cublasLtMatmulHeuristicResult_t, 1> results{};
    int found = 0;
    const cublasStatus_t rc = lt.algo_heuristic(handle, p.desc, p.a, p.b, p.c, p.c, pref,
                                                             static_cast<int>(results.size()), results.data(), &found);
    lt.preference_destroy(pref);
    E3_REQUIRE(rc == CUBLAS_STATUS_SUCCESS && found > 0, ErrorKind::Internal,
               "cuBLASLt has no algorithm for [{} x {}] x [{} x {}]^T (alignment {}): {}", kPlanRows, key.k, key.n,
               key.k, key.align, lt.status_string(rc));
    p.algo = results[0].algo;
    int32_t splits = 1;
    size_t written = 0;
    E3_CUBLAS_CHECK(lt.algo_config_get(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                                         sizeof splits, &written));
    E3_REQUIRE(splits <= 1, ErrorKind::Internal, "cuBLASLt chose split-K ({}) for [{} x {}] x [{} x {}]^T", splits,
               kPlanRows, key.k, key.n, key.k);
    p.key = key;
    p.used = true;
  }

};

Gemm::Gemm() : impl_(new Impl) {
  const CublasLtLibrary& lt = impl_->lt;
  try {
    E3_CUBLAS_CHECK(lt.create(&impl_->handle));
    E3_CUDA_CHECK(cudaMalloc(&impl_->workspace, kWorkspaceBytes));
  } catch (...) {  // the destructor does not run for a constructor that throws
    if (impl_->handle) lt.destroy(impl_->handle);
    delete impl_;
    throw;
  }
}

Gemm::~Gemm() {
  const CublasLtLibrary& lt = impl_->lt;
  for (Plan& p : impl_->plans) {
    if (!p.used) continue;
    lt.layout_destroy(p.a);
    lt.layout_destroy(p.b);
    lt.layout_destroy(p.c);
    lt.desc_destroy(p.desc);
  }
  cudaFree(impl_->workspace);
  lt.destroy(impl_->handle);
  delete impl_;
}

void Gemm::linear(Tensor x, Tensor w, const Tensor* bias, Tensor y, cudaStream_t s) {
  E3_REQUIRE(((x.dtype == DType::BF16 && w.dtype == DType::BF16 && (y.dtype == DType::BF16 || y.dtype == DType::F32)) ||
              (x.dtype == DType::F32 && w.dtype == DType::F32 && y.dtype == DType::F32)) &&
                 x.cols == w.cols && y.rows == x.rows && y.cols == w.rows && (!bias || bias->dtype == y.dtype) &&
                 (!bias || bias->numel() == y.cols),
             ErrorKind::Internal, "cuda linear: x {} w {} y {}", x.shape_str(), w.shape_str(), y.shape_str());
  if (x.rows == 0) return;
  const size_t ye = dtype_size(y.dtype);
  PlanKey key;
  key.n = w.rows;
  key.k = x.cols;
  key.ldx = x.stride;
  key.ldw = w.stride;
  key.ldy = y.stride;
  key.out_type = static_cast<int>(y.dtype);
  key.bias = bias ? 1 : 0;
  const int64_t xe = static_cast<int64_t>(dtype_size(x.dtype));
  key.in_type = static_cast<int>(x.dtype);
  key.align = alignment(x.data, w.data, y.data, bias ? bias->data : nullptr, x.stride * xe, w.stride * xe,
                        y.stride * static_cast<int64_t>(ye));
  const cudaDataType_t in_type = x.dtype == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t out_type = y.dtype == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  Plan& p = impl_->plan_for(key, in_type, out_type);
  const CublasLtLibrary& lt = impl_->lt;
  if (p.layout_rows != x.rows) {  // the same algorithm for any M: only the layouts' column count changes
    const uint64_t rows = static_cast<uint64_t>(x.rows);
    E3_CUBLAS_CHECK(lt.layout_set(p.b, CUBLASLT_MATRIX_LAYOUT_COLS, &rows, sizeof rows));
    E3_CUBLAS_CHECK(lt.layout_set(p.c, CUBLASLT_MATRIX_LAYOUT_COLS, &rows, sizeof rows));
    p.layout_rows = x.rows;
  }
  if (bias) {
    const void* bp = bias->data;
    E3_CUBLAS_CHECK(lt.desc_set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
  }
  const float one = 1.0f, zero = 0.0f;
  E3_CUBLAS_CHECK(lt.matmul(impl_->handle, p.desc, &one, w.data, p.a, x.data, p.b, &zero, y.data, p.c, y.data,
                                 p.c, &p.algo, impl_->workspace, kWorkspaceBytes, s));
}

}  // namespace e3::kernels::cuda
