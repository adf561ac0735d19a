#include <algorithm>
#include <vector>

#include "core/error.h"
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
      E3_REQUIRE(t.dtype == DType::F32, ErrorKind::Internal,
                 "the MPI communicator reduces fp32 host tensors, got {}", t.shape_str());
      sum_in_rank_order(t.as<float>(), t.numel());
      return;
    }
    // Device memory: through the host, summed in fp32 (every rank then rounds the same sum).
    staging_.resize(static_cast<size_t>(t.numel()));
    backend_.download_float(t, staging_.data());
    sum_in_rank_order(staging_.data(), t.numel());
    backend_.upload_float(t, staging_.data());
  }

 private:
  // MPI_Allreduce picks its algorithm (and so the order in which ranks' values are added) by
  // message size, and a ring adds an element's values in an order that depends on the element's
  // offset: a token's sum would then change with the tokens packed before it. Here every element
  // is p0 + p1 + ... in rank order: each rank sums one slice of every rank's values (all-to-all),
  // then the slices are gathered. The traffic is a ring all-reduce's.
  void sum_in_rank_order(float* data, int64_t n) {
    const auto ranks = static_cast<size_t>(size_);
    counts_.resize(ranks);
    displs_.resize(ranks);
    for (size_t r = 0; r < ranks; ++r) {
      const int64_t begin = n * static_cast<int64_t>(r) / size_, end = n * static_cast<int64_t>(r + 1) / size_;
      displs_[r] = static_cast<int>(begin);
      counts_[r] = static_cast<int>(end - begin);
    }
    const int mine = counts_[static_cast<size_t>(rank_)];
    slices_.resize(ranks * static_cast<size_t>(std::max(mine, 1)));
    recv_counts_.assign(ranks, mine);
    recv_displs_.resize(ranks);
    for (size_t r = 0; r < ranks; ++r) recv_displs_[r] = static_cast<int>(r) * mine;
    E3_MPI_CHECK(MPI_Alltoallv(data, counts_.data(), displs_.data(), MPI_FLOAT, slices_.data(), recv_counts_.data(),
                               recv_displs_.data(), MPI_FLOAT, comm_));
    float* out = data + displs_[static_cast<size_t>(rank_)];
    for (int i = 0; i < mine; ++i) {
      float sum = slices_[static_cast<size_t>(i)];
      for (size_t r = 1; r < ranks; ++r) sum += slices_[r * static_cast<size_t>(mine) + static_cast<size_t>(i)];
      out[i] = sum;
    }
    E3_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data, counts_.data(), displs_.data(), MPI_FLOAT, comm_));
  }

 private:
  MPI_Comm comm_;
  kernels::Backend& backend_;
  std::vector<float> staging_;
  std::vector<float> slices_;  // every rank's values of this rank's slice, rank after rank
  std::vector<int> counts_, displs_, recv_counts_, recv_displs_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, kernels::Backend& backend) {
  return std::make_unique<MpiCommunicator>(comm, backend);
}

}  // namespace e3::parallel
