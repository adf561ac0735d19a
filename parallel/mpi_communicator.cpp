#include <vector>

#include "kernels/error.h"
#include "parallel/communicator.h"
#include "parallel/mpi_check.h"

namespace e3::parallel {
namespace {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, kernels::Backend& backend) : comm_(comm), backend_(backend) {
    E3_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    E3_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  void all_reduce_sum(kernels::Tensor t) override {
    if (size_ == 1) return;
    E3_REQUIRE(t.contiguous(), ErrorKind::Internal, "all-reduce of strided {}", t.shape_str());
    if (backend_.name() == "cpu") {
      E3_REQUIRE(t.dtype == kernels::DType::F32, ErrorKind::Internal,
                 "the MPI communicator reduces fp32 host tensors, got {}", t.shape_str());
      E3_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, t.data, static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM, comm_));
      return;
    }
    // Device memory: through the host, summed in fp32 (every rank then rounds the same sum).
    staging_.resize(static_cast<size_t>(t.numel()));
    backend_.download_float(t, staging_.data());
    E3_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, staging_.data(), static_cast<int>(t.numel()), MPI_FLOAT, MPI_SUM, comm_));
    backend_.upload_float(t, staging_.data());
  }

 private:
  MPI_Comm comm_;
  kernels::Backend& backend_;
  std::vector<float> staging_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, kernels::Backend& backend) {
  return std::make_unique<MpiCommunicator>(comm, backend);
}

}  // namespace e3::parallel
