// Runs under mpirun -np 2 and -np 4 (CTest: mpi_np2, mpi_np4).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <vector>

#include "kernels/backend.h"
#include "core/error.h"
#include "parallel/agreement.h"
#include "parallel/communicator.h"
#include "parallel/mpi_env.h"

namespace e3 {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

TEST(MpiCommunicator, AllReduceSumsOverTheTpGroup) {
  for (int tp : {1, 2, world_size()}) {
    if (world_size() % tp) continue;
    parallel::Grid grid(tp);
    auto cpu = kernels::make_cpu_backend(1);
    auto comm = parallel::make_mpi_communicator(grid.tp_comm(), *cpu);
    EXPECT_EQ(comm->size(), tp);
    EXPECT_EQ(comm->rank(), world_rank() % tp);
    std::vector<float> v(1000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(grid.tp_rank() + 1) * static_cast<float>(i);
    comm->all_reduce_sum(kernels::Tensor(v.data(), DType::F32, 10, 100));
    const float factor = static_cast<float>(tp * (tp + 1) / 2);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], factor * static_cast<float>(i)) << "tp " << tp << " i " << i;
  }
}

// A token's reduced row must be the same bits wherever it sits in the reduced tensor: MPI's own
// all-reduce adds ranks' values in an order that depends on the message size and the offset.
TEST(MpiCommunicator, AllReduceOfARowDoesNotDependOnItsNeighbours) {
  parallel::Grid grid(world_size());
  auto cpu = kernels::make_cpu_backend(1);
  auto comm = parallel::make_mpi_communicator(grid.tp_comm(), *cpu);
  const int64_t cols = 37;
  auto value = [&](int64_t row, int64_t col) {  // magnitudes that make the order of additions matter
    const uint32_t h = static_cast<uint32_t>((row * 131 + col) * 2654435761u + static_cast<uint32_t>(grid.tp_rank()) * 97u);
    return std::ldexp(static_cast<float>(h % 10007) - 5003.0f, static_cast<int>(h % 23) - 11);
  };
  auto reduce_rows = [&](int64_t first, int64_t rows) {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] = value(first + r, c);
    comm->all_reduce_sum(kernels::Tensor(v.data(), DType::F32, rows, cols));
    return v;
  };
  const int64_t total = 30000;  // large enough for Open MPI's segmented algorithms
  const std::vector<float> whole = reduce_rows(0, total);
  for (int64_t first : {int64_t{0}, int64_t{1}, int64_t{777}, int64_t{29999}})
    for (int64_t rows : {int64_t{1}, int64_t{3}}) {
      if (first + rows > total) continue;
      const std::vector<float> part = reduce_rows(first, rows);
      for (size_t i = 0; i < part.size(); ++i)
        ASSERT_EQ(part[i], whole[static_cast<size_t>(first * cols) + i]) << "row " << first << " of " << rows;
    }
}

TEST(Grid, SplitsWorldIntoDpGroupsOfTpRanks) {
  const int n = world_size();
  parallel::Grid grid(2);
  EXPECT_EQ(grid.tp_size(), 2);
  EXPECT_EQ(grid.dp_size(), n / 2);
  EXPECT_EQ(grid.tp_rank(), world_rank() % 2);
  EXPECT_EQ(grid.dp_rank(), world_rank() / 2);
  EXPECT_EQ(grid.is_writer(), world_rank() % 2 == 0);
  EXPECT_EQ(grid.tag(), fmt::format("[r{}/{} tp{} dp{}]", world_rank(), n, world_rank() % 2, world_rank() / 2));
  parallel::Grid all(0);
  EXPECT_EQ(all.tp_size(), n);
  EXPECT_EQ(all.dp_size(), 1);
}

TEST(Grid, RejectsTpThatDoesNotDivideTheWorld) {
  try {
    parallel::Grid grid(3);
    FAIL() << "expected a usage error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("--tp 3"), std::string::npos);
  }
}

TEST(Agreement, EveryRankLearnsTheLowestFailingRankAndItsCode) {
  const int n = world_size();
  // Nobody fails.
  parallel::Failure none = parallel::agree_on_failure(MPI_COMM_WORLD, false, 0);
  EXPECT_EQ(none.rank, -1);
  // The last rank fails with code 3.
  parallel::Failure one = parallel::agree_on_failure(MPI_COMM_WORLD, world_rank() == n - 1, world_rank() == n - 1 ? 3 : 0);
  EXPECT_EQ(one.rank, n - 1);
  EXPECT_EQ(one.code, 3);
  // Ranks 1.. fail with their own codes: rank 1's wins.
  parallel::Failure many = parallel::agree_on_failure(MPI_COMM_WORLD, world_rank() >= 1, 10 + world_rank());
  EXPECT_EQ(many.rank, 1);
  EXPECT_EQ(many.code, 11);
}

}  // namespace
}  // namespace e3
