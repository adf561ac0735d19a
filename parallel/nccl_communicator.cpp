#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <mutex>

#include "kernels/cuda_check.h"
#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/mpi_check.h"

#define E3_NCCL_CHECK(call)                                                                           \
  do {                                                                                                \
    const ncclResult_t e3_nccl_rc_ = (call);                                                          \
    if (e3_nccl_rc_ != ncclSuccess && e3_nccl_rc_ != ncclInProgress)                                  \
      E3_THROW(::e3::ErrorKind::Parallel, "{} failed: {} ({})", #call, ncclGetErrorString(e3_nccl_rc_), \
               ncclGetLastError(nullptr));                                                            \
  } while (0)

namespace e3::parallel {
namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm mpi, kernels::Backend& backend)
      : stream_(static_cast<cudaStream_t>(backend.stream_handle())) {
    E3_REQUIRE(backend.name() == "cuda" && stream_, ErrorKind::Usage, "--comm nccl needs the CUDA backend");
    E3_MPI_CHECK(MPI_Comm_rank(mpi, &rank_));
    E3_MPI_CHECK(MPI_Comm_size(mpi, &size_));
    ncclUniqueId id{};
    if (rank_ == 0) E3_NCCL_CHECK(ncclGetUniqueId(&id));
    E3_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi));
    E3_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

  void all_reduce_sum(kernels::Tensor t) override {
    if (size_ == 1) return;
    E3_REQUIRE(t.contiguous(), ErrorKind::Internal, "all-reduce of strided {}", t.shape_str());
    ncclDataType_t type;
    switch (t.dtype) {
      case DType::BF16: type = ncclBfloat16; break;
      case DType::F32: type = ncclFloat32; break;
      case DType::F16: type = ncclFloat16; break;
      default: E3_THROW(ErrorKind::Internal, "NCCL all-reduce of {}", t.shape_str());
    }
    E3_NCCL_CHECK(ncclAllReduce(t.data, t.data, static_cast<size_t>(t.numel()), type, ncclSum, comm_, stream_));
  }

  std::string async_error() override {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state == ncclSuccess || state == ncclInProgress)
      return "";
    return ncclGetErrorString(state);
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (comm_ && !aborted_) {
      ncclCommAbort(comm_);
      aborted_ = true;
    }
  }

 private:
  int rank_ = 0, size_ = 1;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  std::mutex abort_mutex_;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, kernels::Backend& backend) {
  return std::make_unique<NcclCommunicator>(comm, backend);
}

}  // namespace e3::parallel
