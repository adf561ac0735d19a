// Collectives inside one tensor-parallel group, behind one interface so that the model
// code is the same over MPI (host memory) and NCCL (device memory).
#pragma once

#include <memory>
#include <string>

#include <mpi.h>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace e3::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;
  // In-place sum over the group. `t` must be contiguous.
  virtual void all_reduce_sum(kernels::Tensor t) = 0;
  // An asynchronous failure of the communicator (NCCL), or "" if none. Safe from any thread.
  virtual std::string async_error() { return ""; }
  // Aborts outstanding collectives so that no rank waits forever. Safe from any thread.
  virtual void abort() {}
};

// MPI_Allreduce. With a GPU backend the tensor is staged through host memory as fp32 (slow,
// but lets several ranks share one GPU). `comm` and `backend` must outlive the communicator.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, kernels::Backend& backend);

// NCCL over the backend's stream; the unique id is made on rank 0 of `comm` and sent with
// MPI_Bcast. Throws a usage error when the build has no NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, kernels::Backend& backend);

}  // namespace e3::parallel
