// The start-up snapshot of the environment: what it holds of the process's, and that a name
// outside its list is a bug rather than a variable silently never set.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "core/environment.h"
#include "parallel/mpi_env.h"
#include "support/test_support.h"

namespace {

using e3::Environment;
using Vars = std::map<std::string, std::string>;

TEST(Environment, TellsUnsetFromSetButEmpty) {
  const Environment env(Vars{{"SLURM_JOB_ID", "12"}, {"E3_PROFILE", ""}});
  EXPECT_EQ(env.get("SLURM_JOB_ID"), "12");
  EXPECT_EQ(env.get("E3_PROFILE"), "");
  EXPECT_EQ(env.get("SLURM_ARRAY_TASK_ID"), std::nullopt);
  EXPECT_EQ(Environment{}.get("SLURM_JOB_ID"), std::nullopt);
}

TEST(Environment, ANameOutsideTheListIsAnInternalError) {
  const auto read = e3::test::error_of([] { Environment{}.get("HOME"); });
  ASSERT_TRUE(read);
  EXPECT_EQ(read->kind(), e3::ErrorKind::Internal);
  EXPECT_TRUE(e3::test::Contains(read->what(), "HOME"));
  const auto built = e3::test::error_of([] { Environment(Vars{{"E3_NO_SUCH_KNOB", "1"}}); });
  ASSERT_TRUE(built);
  EXPECT_EQ(built->kind(), e3::ErrorKind::Internal);
  EXPECT_TRUE(e3::test::Contains(built->what(), "E3_NO_SUCH_KNOB"));
}

TEST(Environment, TheSnapshotIsTheProcesssAtTheTimeItIsTaken) {
  ASSERT_EQ(::setenv("SLURM_ARRAY_TASK_STEP", "3", 1), 0);
  ASSERT_EQ(::setenv("E3_MOE_UNFUSED", "", 1), 0);
  ASSERT_EQ(::unsetenv("E3_FAIL_ON_RANK"), 0);
  const Environment taken = Environment::of_process();
  ASSERT_EQ(::setenv("SLURM_ARRAY_TASK_STEP", "4", 1), 0);  // later changes are not seen
  EXPECT_EQ(taken.get("SLURM_ARRAY_TASK_STEP"), "3");
  EXPECT_EQ(taken.get("E3_MOE_UNFUSED"), "");
  EXPECT_EQ(taken.get("E3_FAIL_ON_RANK"), std::nullopt);
  ::unsetenv("SLURM_ARRAY_TASK_STEP");
  ::unsetenv("E3_MOE_UNFUSED");
}

// MpiEnv gives a process started on its own Open MPI's fast singleton defaults; one that a
// launcher started keeps the launcher's choices, whichever launcher it was.
TEST(Environment, AProcessIsAloneUnlessALauncherGaveItARank) {
  EXPECT_TRUE(e3::parallel::started_alone(Environment{}));
  // An sbatch script running the program directly, without srun, is still alone.
  EXPECT_TRUE(e3::parallel::started_alone(Environment(Vars{{"SLURM_JOB_ID", "7"}, {"SLURM_ARRAY_TASK_ID", "2"}})));
  for (const char* launcher : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_FD"})
    EXPECT_FALSE(e3::parallel::started_alone(Environment(Vars{{launcher, "0"}}))) << launcher;
}

}  // namespace
