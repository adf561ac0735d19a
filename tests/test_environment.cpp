// The start-up snapshot of the environment: what it holds of the process's, and that a name
// outside its list is a bug rather than a variable silently never set.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "core/cpu_share.h"
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

// What a process started alone sets: each variable is one that Open MPI or hwloc reads, and the
// GPU plugins hwloc would start CUDA, NVML and OpenCL with are left out (0.34 -> 0.04 s for
// --version on the GPU machine, 2026-12-05).
TEST(Environment, AProcessStartedAloneLeavesOutWhatAWorldOfOneNeverUses) {
  std::map<std::string, std::string> set;
  for (const auto& d : e3::parallel::singleton_defaults()) set[d.name] = d.value;
  EXPECT_EQ(set["OMPI_MCA_ess_singleton_isolated"], "1");
  EXPECT_EQ(set["OMPI_MCA_pml"], "ob1");
  EXPECT_EQ(set["OMPI_MCA_btl"], "self");
  const std::string hwloc = "," + set["HWLOC_COMPONENTS"] + ",";
  for (const char* plugin : {"cuda", "nvml", "opencl", "gl"})
    EXPECT_NE(hwloc.find(std::string(",-") + plugin + ","), std::string::npos) << plugin << " in " << hwloc;
  EXPECT_EQ(set.size(), 4u);
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

// A launcher that bound a rank to fewer CPUs than its share is named in the log: Open MPI's
// mpirun binds each of one or two ranks to a single core, which made an export 28% slower
// (1.28 against 1.77 GB/s, 2026-12-05, the GPU machine's 16 cores).
TEST(CpuShare, ABindingBelowTheRanksShareIsNamed) {
  EXPECT_EQ(e3::cpu_binding_warning(16, 16, 1), std::nullopt);
  EXPECT_EQ(e3::cpu_binding_warning(12, 96, 8), std::nullopt);   // srun --cpus-per-task=12
  EXPECT_EQ(e3::cpu_binding_warning(64, 128, 8), std::nullopt);  // mpirun -np 8: a socket each
  EXPECT_EQ(e3::cpu_binding_warning(1, 2, 2), std::nullopt);     // one core each is the share
  EXPECT_EQ(e3::cpu_binding_warning(1, 1, 1), std::nullopt);
  EXPECT_EQ(e3::cpu_binding_warning(5, 16, 2), std::nullopt);    // not under half of 8
  const auto w = e3::cpu_binding_warning(1, 16, 1);              // mpirun -np 1
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("may run on 1 of the machine's 16 CPUs, where its share (1 rank on this node) is 16"),
            std::string::npos) << *w;
  EXPECT_NE(w->find("--bind-to none"), std::string::npos) << *w;
  EXPECT_TRUE(e3::cpu_binding_warning(1, 2, 1));                 // the 2-core build machine under mpirun -np 1
  EXPECT_TRUE(e3::cpu_binding_warning(3, 64, 8));                // under half of 8
  EXPECT_NE(e3::cpu_binding_warning(1, 96, 8)->find("--cpus-per-task=12"), std::string::npos);  // srun's default
  EXPECT_GE(e3::usable_cpus(), 1);
  EXPECT_LE(e3::usable_cpus(), e3::machine_cpus());
}

}  // namespace
