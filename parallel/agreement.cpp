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

void agreed_phase(MPI_Comm comm, const std::function<void()>& body) {
  std::exception_ptr failure;
  try {
    body();
  } catch (...) {
    failure = std::current_exception();
  }
  const Failure f = agree_on_failure(comm, failure != nullptr, failure ? failure_exit_code(failure) : 0);
  if (f.rank < 0) return;
  int rank = 0;
  E3_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  if (f.rank == rank) rethrow_agreed(failure);
  if (failure) {
    try {
      rethrow_agreed(failure);
    } catch (const Error& e) {
      spdlog::debug("also failed here, reported by rank {}: {}", f.rank, e.what());
    }
  }
  throw PeerFailed{f.rank, f.code};
}

void agreed_phase(const Grid& grid, const std::function<void()>& setup) { agreed_phase(grid.world(), setup); }

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

int broadcast_from_root(MPI_Comm comm, int value) {
  E3_MPI_CHECK(MPI_Bcast(&value, 1, MPI_INT, 0, comm));
  return value;
}

namespace {

// Where each rank's text starts when the texts of `lens` bytes lie back to back.
std::vector<int> offsets_of(const std::vector<int>& lens) {
  std::vector<int> offsets(lens.size());
  for (size_t i = 1; i < lens.size(); ++i) offsets[i] = offsets[i - 1] + lens[i - 1];
  return offsets;
}

std::vector<std::string> split_texts(const std::string& all, const std::vector<int>& lens) {
  std::vector<std::string> out;
  size_t at = 0;
  for (const int len : lens) {
    out.push_back(all.substr(at, static_cast<size_t>(len)));
    at += static_cast<size_t>(len);
  }
  return out;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  E3_MPI_CHECK(MPI_Comm_size(comm, &size));
  return size;
}

}  // namespace

std::vector<std::string> gather_to_root(MPI_Comm comm, const std::string& mine) {
  int rank = 0;
  E3_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(comm_size(comm)));
  E3_MPI_CHECK(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm));
  const std::vector<int> offsets = offsets_of(lens);
  std::string all(rank == 0 ? static_cast<size_t>(offsets.back() + lens.back()) : 0, '\0');
  E3_MPI_CHECK(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0, comm));
  return rank == 0 ? split_texts(all, lens) : std::vector<std::string>{};
}

std::vector<std::string> gather_to_all(MPI_Comm comm, const std::string& mine) {
  const int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(comm_size(comm)));
  E3_MPI_CHECK(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
  const std::vector<int> offsets = offsets_of(lens);
  std::string all(static_cast<size_t>(offsets.back() + lens.back()), '\0');
  E3_MPI_CHECK(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, comm));
  return split_texts(all, lens);
}

std::vector<double> sum_to_root(MPI_Comm comm, const std::vector<double>& values) {
  std::vector<double> sums(values.size(), 0.0);
  E3_MPI_CHECK(MPI_Reduce(values.data(), sums.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, 0, comm));
  return sums;
}

std::vector<uint64_t> sum_to_all(MPI_Comm comm, const std::vector<uint64_t>& values) {
  std::vector<uint64_t> sums(values.size(), 0);
  E3_MPI_CHECK(MPI_Allreduce(values.data(), sums.data(), static_cast<int>(values.size()), MPI_UINT64_T, MPI_SUM,
                             comm));
  return sums;
}

double max_to_root(MPI_Comm comm, double value) {
  double max = 0;
  E3_MPI_CHECK(MPI_Reduce(&value, &max, 1, MPI_DOUBLE, MPI_MAX, 0, comm));
  return max;
}

void barrier(MPI_Comm comm) { E3_MPI_CHECK(MPI_Barrier(comm)); }

}  // namespace e3::parallel
