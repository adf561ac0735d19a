#include "parallel/agreement.h"

#include "parallel/mpi_check.h"

namespace e3::parallel {

Failure agree_on_failure(MPI_Comm comm, bool failed, int code) {
  int rank = 0;
  E3_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  struct {
    int value;
    int rank;
  } mine{failed ? 0 : 1, rank}, first{};
  E3_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_2INT, MPI_MINLOC, comm));
  if (first.value != 0) return {};
  Failure f{first.rank, code};
  E3_MPI_CHECK(MPI_Bcast(&f.code, 1, MPI_INT, f.rank, comm));
  return f;
}

}  // namespace e3::parallel
