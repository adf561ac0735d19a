// Agreeing on failure at a point every rank reaches, so that a failure on one rank ends
// the whole job with that rank's one message instead of a hang or a storm of errors.
#pragma once

#include <mpi.h>

namespace e3::parallel {

struct Failure {
  int rank = -1;  // lowest failing rank in the communicator, -1 if none failed
  int code = 0;   // that rank's exit code
};

// Thrown on the ranks that did not fail when another rank did: the failing rank reports
// the error; these only exit with its code.
struct PeerFailed {
  int rank;
  int code;
};

// Collective over `comm`: every rank passes whether it failed and its exit code.
Failure agree_on_failure(MPI_Comm comm, bool failed, int code);

}  // namespace e3::parallel
