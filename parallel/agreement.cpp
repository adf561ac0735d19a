#include "parallel/agreement.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
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

int failure_exit_code(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return exit_code(e.kind());
  } catch (...) {
    return exit_code(ErrorKind::Internal);
  }
}

void rethrow_agreed(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (Error& e) {
    e.set_agreed();
    throw;
  } catch (const std::exception& e) {
    Error err(ErrorKind::Internal, e.what(), __FILE__, __LINE__);
    err.set_agreed();
    throw err;
  } catch (...) {
    Error err(ErrorKind::Internal, "an exception that is not a std::exception", __FILE__, __LINE__);
    err.set_agreed();
    throw err;
  }
}

void agreed_phase(const Grid& grid, const std::function<void()>& setup) {
  std::exception_ptr failure;
  try {
    setup();
  } catch (...) {
    failure = std::current_exception();
  }
  const Failure f = agree_on_failure(grid.world(), failure != nullptr, failure ? failure_exit_code(failure) : 0);
  if (f.rank < 0) return;
  if (f.rank == grid.world_rank()) rethrow_agreed(failure);
  if (failure) {
    try {
      rethrow_agreed(failure);
    } catch (const Error& e) {
      spdlog::debug("also failed here, reported by rank {}: {}", f.rank, e.what());
    }
  }
  throw PeerFailed{f.rank, f.code};
}

StepAgreement agree_on_step(const Grid& grid, int stop_signal, const std::exception_ptr& failure, int64_t samples,
                            int64_t tokens) {
  const auto dp = static_cast<size_t>(grid.dp_size());
  std::vector<int64_t> v(2 + 2 * dp, 0);
  v[0] = stop_signal;
  // max picks the lowest failing rank; its code rides in the low byte.
  if (failure) v[1] = static_cast<int64_t>(grid.world_size() - grid.world_rank()) * 256 + failure_exit_code(failure);
  if (grid.is_writer()) {
    v[2 + static_cast<size_t>(grid.dp_rank())] = samples;
    v[2 + dp + static_cast<size_t>(grid.dp_rank())] = tokens;
  }
  E3_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_INT64_T, MPI_MAX, grid.world()));
  StepAgreement a;
  a.stop_signal = static_cast<int>(v[0]);
  if (v[1] > 0) {
    a.failed_rank = grid.world_size() - static_cast<int>(v[1] / 256);
    a.code = static_cast<int>(v[1] % 256);
  }
  a.samples_by_group.assign(v.begin() + 2, v.begin() + 2 + static_cast<std::ptrdiff_t>(dp));
  a.tokens_by_group.assign(v.begin() + 2 + static_cast<std::ptrdiff_t>(dp), v.end());
  return a;
}

std::vector<int64_t> broadcast_indices(const Grid& grid, std::vector<int64_t> values) {
  int64_t n = static_cast<int64_t>(values.size());
  E3_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, grid.world()));
  values.resize(static_cast<size_t>(n));
  E3_MPI_CHECK(MPI_Bcast(values.data(), static_cast<int>(n), MPI_INT64_T, 0, grid.world()));
  return values;
}

std::vector<std::string> gather_to_root(MPI_Comm comm, const std::string& mine) {
  int size = 0, rank = 0;
  E3_MPI_CHECK(MPI_Comm_size(comm, &size));
  E3_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  E3_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm));
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int i = 0; i < size; ++i) {
      displs[static_cast<size_t>(i)] = total;
      total += lens[static_cast<size_t>(i)];
    }
    all.resize(static_cast<size_t>(total));
  }
  E3_MPI_CHECK(
      MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0, comm));
  std::vector<std::string> out;
  if (rank != 0) return out;
  for (int i = 0; i < size; ++i)
    out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(i)]),
                             static_cast<size_t>(lens[static_cast<size_t>(i)])));
  return out;
}

}  // namespace e3::parallel
