// The start-up snapshot of the environment: what it holds of the process's, and that a name
// outside its list is a bug rather than a variable silently never set.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "core/environment.h"
#include "core/error.h"
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

// srun without the MPI plugin Open MPI speaks starts N singletons, each of which would run the
// whole job into the same directory: the launcher's count against the world's size stops them.
TEST(Environment, ALauncherThatStartedSeveralProcessesNeedsAWorldOfThatSize) {
  using e3::parallel::launched_processes;
  using e3::parallel::require_world_of_launch;
  EXPECT_EQ(launched_processes(Environment{}), std::nullopt);
  EXPECT_EQ(launched_processes(Environment(Vars{{"OMPI_COMM_WORLD_SIZE", "8"}})), 8);
  EXPECT_EQ(launched_processes(Environment(Vars{{"PMI_SIZE", "4"}})), 4);
  // srun's count counts only for the processes srun started; under mpirun (which starts its
  // daemons with srun) Open MPI's own variable comes first.
  EXPECT_EQ(launched_processes(Environment(Vars{{"SLURM_STEP_NUM_TASKS", "8"}})), std::nullopt);
  EXPECT_EQ(launched_processes(Environment(Vars{{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_SRUN_COMM_PORT", "4242"}})), 8);
  EXPECT_EQ(launched_processes(Environment(
                Vars{{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_SRUN_COMM_PORT", "1"}, {"OMPI_COMM_WORLD_SIZE", "16"}})),
            16);
  EXPECT_EQ(launched_processes(Environment(Vars{{"OMPI_COMM_WORLD_SIZE", "eight"}})), std::nullopt);

  const Environment srun_without_plugin(Vars{{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_SRUN_COMM_PORT", "4242"}});
  try {
    require_world_of_launch(srun_without_plugin, 1);
    ADD_FAILURE() << "eight singletons were let run";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Parallel);
    EXPECT_NE(std::string(e.what()).find("--mpi=pmix"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(require_world_of_launch(srun_without_plugin, 8));
  EXPECT_NO_THROW(require_world_of_launch(Environment(Vars{{"SLURM_STEP_NUM_TASKS", "1"}, {"SLURM_SRUN_COMM_PORT", "1"}}), 1));
  EXPECT_NO_THROW(require_world_of_launch(Environment{}, 1));
}

}  // namespace
