// Collectives inside one tensor-parallel group, behind one interface so that the model
// code is the same over MPI (host memory) and NCCL (device memory).
#pragma once

#include <memory>
#include <string>

#include <mpi.h>

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
};

// MPI_Allreduce over host memory (fp32). `comm` must outlive the communicator.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);

}  // namespace e3::parallel
