// The agreements of the extraction loop (parallel/agreement), under mpirun -np 2 and -np 4.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "core/error.h"
#include "parallel/agreement.h"
#include "parallel/mpi_env.h"

namespace e3 {
namespace {

int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

TEST(StepAgreement, CarriesStopsFailuresAndEveryGroupsProgress) {
  const parallel::Grid grid(2);  // 2 ranks a TP group: -np 4 has two DP groups
  const int n = grid.world_size();
  // Rank n-1 sees a signal; the writers report their groups' progress.
  parallel::StepAgreement a =
      parallel::agree_on_step(grid, grid.world_rank() == n - 1 ? 15 : 0, nullptr, 10 + grid.dp_rank(), 100);
  EXPECT_EQ(a.stop_signal, 15);
  EXPECT_EQ(a.failed_rank, -1);
  ASSERT_EQ(a.samples_by_group.size(), static_cast<size_t>(grid.dp_size()));
  for (int g = 0; g < grid.dp_size(); ++g) {
    EXPECT_EQ(a.samples_by_group[static_cast<size_t>(g)], 10 + g);
    EXPECT_EQ(a.tokens_by_group[static_cast<size_t>(g)], 100);
  }
  // Ranks 1.. fail, rank 1 with an e3::Error of kind Input, the others with a std::exception
  // (an internal error): the lowest wins, with its code.
  std::exception_ptr failure;
  if (grid.world_rank() == 1) failure = std::make_exception_ptr(Error(ErrorKind::Input, "bad line", __FILE__, __LINE__));
  if (grid.world_rank() > 1) failure = std::make_exception_ptr(std::runtime_error("other"));
  a = parallel::agree_on_step(grid, 0, failure, 0, 0);
  EXPECT_EQ(a.failed_rank, 1);
  EXPECT_EQ(a.code, exit_code(ErrorKind::Input));
}

TEST(AgreedPhase, AnyExceptionIsAgreedAsTheLowestFailingRanksError) {
  const parallel::Grid grid(1);
  const int last = grid.world_size() - 1;
  // A std::filesystem_error (not an e3::Error) on the last rank: that rank throws it as an
  // agreed internal error carrying its message; every other rank throws PeerFailed.
  try {
    parallel::agreed_phase(grid, [&] {
      if (grid.world_rank() == last)
        throw std::filesystem::filesystem_error("publishing", std::filesystem::path("shard"),
                                                std::make_error_code(std::errc::io_error));
    });
    FAIL() << "no rank failed";
  } catch (const Error& e) {
    EXPECT_EQ(grid.world_rank(), last);
    EXPECT_EQ(e.kind(), ErrorKind::Internal);
    EXPECT_TRUE(e.agreed());
    EXPECT_NE(std::string(e.what()).find("publishing"), std::string::npos) << e.what();
  } catch (const parallel::PeerFailed& p) {
    EXPECT_NE(grid.world_rank(), last);
    EXPECT_EQ(p.rank, last);
    EXPECT_EQ(p.code, exit_code(ErrorKind::Internal));
  }
  EXPECT_NO_THROW(parallel::agreed_phase(grid, [] {}));
}

TEST(Agreement, BroadcastsAndGathers) {
  const parallel::Grid grid(1);
  const std::vector<int64_t> mine = grid.world_rank() == 0 ? std::vector<int64_t>{4, 8, 15} : std::vector<int64_t>{};
  EXPECT_EQ(parallel::broadcast_indices(grid, mine), (std::vector<int64_t>{4, 8, 15}));
  const std::vector<std::string> all =
      parallel::gather_to_root(MPI_COMM_WORLD, std::string(static_cast<size_t>(grid.world_rank()), 'x'));
  if (grid.world_rank() != 0) {
    EXPECT_TRUE(all.empty());
    return;
  }
  ASSERT_EQ(all.size(), static_cast<size_t>(world_size()));
  for (int r = 0; r < world_size(); ++r) EXPECT_EQ(all[static_cast<size_t>(r)], std::string(static_cast<size_t>(r), 'x'));
}

TEST(Agreement, GathersToEveryRankReducesToRankZeroAndBroadcastsFromIt) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int n = world_size();
  // Texts of different lengths (rank 0's empty) arrive on every rank in rank order.
  const auto text_of = [](int r) { return std::string(static_cast<size_t>(r), static_cast<char>('a' + r)); };
  const std::vector<std::string> all = parallel::gather_to_all(MPI_COMM_WORLD, text_of(rank));
  ASSERT_EQ(all.size(), static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], text_of(r));

  const std::vector<double> sums = parallel::sum_to_root(MPI_COMM_WORLD, {1.0, 0.5 * rank});
  const double max = parallel::max_to_root(MPI_COMM_WORLD, rank == 1 ? 7.5 : -1.0);
  if (rank == 0) {
    EXPECT_EQ(sums, (std::vector<double>{static_cast<double>(n), 0.25 * n * (n - 1)}));
    EXPECT_EQ(max, 7.5);
  } else {
    EXPECT_EQ(sums, (std::vector<double>{0.0, 0.0}));
    EXPECT_EQ(max, 0.0);
  }
  EXPECT_EQ(parallel::broadcast_from_root(MPI_COMM_WORLD, rank == 0 ? 42 : rank), 42);
  parallel::barrier(MPI_COMM_WORLD);
  // mpirun here starts every rank on this one machine.
  EXPECT_EQ(parallel::ranks_on_node(MPI_COMM_WORLD), n);
}

TEST(AgreedPhase, OverACommunicatorTheLowestFailingRankReports) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Ranks 1.. fail with their own kinds; rank 1's error is the one the job reports.
  try {
    parallel::agreed_phase(MPI_COMM_WORLD, [&] {
      if (rank == 1) E3_THROW(ErrorKind::Output, "DEST is not empty");
      if (rank > 1) E3_THROW(ErrorKind::Verify, "checksum");
    });
    FAIL() << "no rank failed";
  } catch (const Error& e) {
    EXPECT_EQ(rank, 1);
    EXPECT_EQ(e.kind(), ErrorKind::Output);
    EXPECT_TRUE(e.agreed());
  } catch (const parallel::PeerFailed& p) {
    EXPECT_NE(rank, 1);
    EXPECT_EQ(p.rank, 1);
    EXPECT_EQ(p.code, exit_code(ErrorKind::Output));
  }
  EXPECT_NO_THROW(parallel::agreed_phase(MPI_COMM_WORLD, [] {}));
}

}  // namespace
}  // namespace e3
