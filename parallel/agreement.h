// Agreeing at points every rank reaches: on failure, so that a failure on one rank ends the
// whole job with that rank's one message instead of a hang or a storm of errors; and on the
// small facts the extraction loop shares (stop signals, progress, committed shards) and that
// the commands report (problems found, totals).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "parallel/mpi_env.h"

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

// The exit code a failure maps to: an e3::Error's kind, anything else an internal error.
int failure_exit_code(const std::exception_ptr& failure);

// The failure all ranks agreed was this rank's, rethrown as the one error the job reports:
// an e3::Error marked agreed; any other exception an agreed internal error with its message.
[[noreturn]] void rethrow_agreed(const std::exception_ptr& failure);

// Runs `body` on every rank of `comm`, then agrees on failure: the lowest failing rank rethrows
// its error marked agreed; the others throw PeerFailed. Every rank must call it.
void agreed_phase(MPI_Comm comm, const std::function<void()>& body);
// The same over the whole job.
void agreed_phase(const Grid& grid, const std::function<void()>& setup);

struct StepAgreement {
  int stop_signal = 0;
  int failed_rank = -1;
  int code = 0;
  std::vector<int64_t> samples_by_group, tokens_by_group;
};

// One all-reduce (max) over the world at a step boundary: any rank's stop signal, the lowest
// rank that failed (with its exit code), and each group's progress (reported by its writer).
StepAgreement agree_on_step(const Grid& grid, int stop_signal, const std::exception_ptr& failure, int64_t samples,
                            int64_t tokens);

// World rank 0's values on every rank.
std::vector<int64_t> broadcast_indices(const Grid& grid, std::vector<int64_t> values);

// Rank 0's value on every rank of `comm`.
int broadcast_from_root(MPI_Comm comm, int value);

// Every rank's text, in rank order, on rank 0 of `comm` (empty elsewhere).
std::vector<std::string> gather_to_root(MPI_Comm comm, const std::string& mine);
// Every rank's text, in rank order, on every rank of `comm`.
std::vector<std::string> gather_to_all(MPI_Comm comm, const std::string& mine);

// Element by element, the sum of every rank's `values` (all of one length) on rank 0 of
// `comm`; zeros elsewhere. For a report's totals.
std::vector<double> sum_to_root(MPI_Comm comm, const std::vector<double>& values);
// Element by element, the sum of every rank's `values` (all of one length) on every rank.
std::vector<uint64_t> sum_to_all(MPI_Comm comm, const std::vector<uint64_t>& values);
// The largest rank's `value` on rank 0 of `comm`; 0 elsewhere.
double max_to_root(MPI_Comm comm, double value);

// Returns once every rank of `comm` has called it: the start and end of a timed section.
void barrier(MPI_Comm comm);

}  // namespace e3::parallel
