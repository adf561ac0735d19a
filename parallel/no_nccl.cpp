#include "core/error.h"
#include "parallel/communicator.h"

namespace e3::parallel {

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, kernels::Backend&) {
  E3_THROW(ErrorKind::Usage, "this build of eagle3_extract has no NCCL (use --comm mpi)");
}

}  // namespace e3::parallel
