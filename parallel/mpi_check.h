// Turns an MPI return code into an exception that carries MPI's own error string.
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.h"

namespace e3::parallel {

std::string mpi_error_string(int code);

}  // namespace e3::parallel

#define E3_MPI_CHECK(call)                                                                  \
  do {                                                                                      \
    const int e3_mpi_rc_ = (call);                                                          \
    if (e3_mpi_rc_ != MPI_SUCCESS)                                                          \
      E3_THROW(::e3::ErrorKind::Parallel, "{} failed: {}", #call,                          \
               ::e3::parallel::mpi_error_string(e3_mpi_rc_));                               \
  } while (0)
