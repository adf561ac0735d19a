// The start-up snapshot of the environment: what it holds of the process's, and that a name
// outside its list is a bug rather than a variable silently never set.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>

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
  constexpr long kPid = 4321;
  EXPECT_EQ(launched_processes(Environment{}, kPid), std::nullopt);
  EXPECT_EQ(launched_processes(Environment(Vars{{"OMPI_COMM_WORLD_SIZE", "8"}}), kPid), 8);
  EXPECT_EQ(launched_processes(Environment(Vars{{"PMI_SIZE", "4"}}), kPid), 4);
  // srun's count counts only for a task srun started itself: not for a program run from a shell
  // that srun started (`srun -n 8 --pty bash`), nor under mpirun (which starts its daemons with
  // srun), where Open MPI's own variable comes first.
  const Vars srun_task{{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_SRUN_COMM_PORT", "4242"}, {"SLURM_TASK_PID", "4321"}};
  EXPECT_EQ(launched_processes(Environment(srun_task), kPid), 8);
  EXPECT_EQ(launched_processes(Environment(srun_task), kPid + 1), std::nullopt);
  EXPECT_EQ(launched_processes(Environment(Vars{{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_TASK_PID", "4321"}}), kPid),
            std::nullopt);
  Vars under_mpirun = srun_task;
  under_mpirun["OMPI_COMM_WORLD_SIZE"] = "16";
  EXPECT_EQ(launched_processes(Environment(under_mpirun), kPid), 16);
  EXPECT_EQ(launched_processes(Environment(Vars{{"OMPI_COMM_WORLD_SIZE", "eight"}}), kPid), std::nullopt);

  // require_world_of_launch looks at this process's own pid.
  Vars here = srun_task;
  here["SLURM_TASK_PID"] = std::to_string(::getpid());
  try {
    require_world_of_launch(Environment(here), 1);
    ADD_FAILURE() << "eight singletons were let run";
  } catch (const e3::Error& e) {
    EXPECT_EQ(e.kind(), e3::ErrorKind::Parallel);
    EXPECT_NE(std::string(e.what()).find("--mpi=pmix"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(require_world_of_launch(Environment(here), 8));
  EXPECT_NO_THROW(require_world_of_launch(Environment(srun_task), 1));  // another process's task pid
  here["SLURM_STEP_NUM_TASKS"] = "1";
  EXPECT_NO_THROW(require_world_of_launch(Environment(here), 1));
  EXPECT_NO_THROW(require_world_of_launch(Environment{}, 1));
}

// A launcher that bound a rank to fewer CPUs than its share is named in the log: Open MPI's
// mpirun binds each of one or two ranks to a single core, which made an export 28% slower
// (1.25 against 1.74 GB/s, 2026-12-05, the GPU machine's 16 cores).
TEST(CpuShare, ABindingBelowTheRanksShareIsNamed) {
  EXPECT_EQ(e3::cpu_binding_warning(16, 16, 1), std::nullopt);
  EXPECT_EQ(e3::cpu_binding_warning(12, 96, 8), std::nullopt);   // srun --cpus-per-task=12
  EXPECT_EQ(e3::cpu_binding_warning(64, 128, 8), std::nullopt);  // mpirun -np 8: a socket each
  EXPECT_EQ(e3::cpu_binding_warning(1, 2, 2), std::nullopt);     // one core each is the share
  EXPECT_EQ(e3::cpu_binding_warning(1, 1, 1), std::nullopt);
  EXPECT_EQ(e3::cpu_binding_warning(5, 16, 2), std::nullopt);    // not under half of 8
  EXPECT_EQ(e3::cpu_binding_warning(4, 4, 1), std::nullopt);     // srun -n1 -c4 on a shared node: its 4 are the job's
  const auto w = e3::cpu_binding_warning(1, 16, 1);              // mpirun -np 1
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("may run on 1 of the 16 CPUs this job has on the node, where its share (1 rank on the node) is 16"),
            std::string::npos) << *w;
  EXPECT_NE(w->find("--bind-to none"), std::string::npos) << *w;
  EXPECT_TRUE(e3::cpu_binding_warning(1, 2, 1));                 // the 2-core build machine under mpirun -np 1
  EXPECT_TRUE(e3::cpu_binding_warning(3, 64, 8));                // under half of 8
  EXPECT_NE(e3::cpu_binding_warning(1, 96, 8)->find("--cpus-per-task=12"), std::string::npos);
}

// What the job has on the node: a cpuset's list, Slurm's count, never more than is online.
TEST(CpuShare, TheJobsCpusComeFromItsCpusetAndSlurm) {
  EXPECT_EQ(e3::count_cpu_list("0-3,8,10-11\n"), 7);
  EXPECT_EQ(e3::count_cpu_list("5"), 1);
  EXPECT_EQ(e3::count_cpu_list("0-127"), 128);
  EXPECT_EQ(e3::count_cpu_list(""), std::nullopt);
  EXPECT_EQ(e3::count_cpu_list("3-1"), std::nullopt);
  EXPECT_EQ(e3::count_cpu_list("0-x"), std::nullopt);
  const int online = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_GE(e3::job_cpus(Environment{}), 1);
  EXPECT_LE(e3::job_cpus(Environment{}), online);
  EXPECT_EQ(e3::job_cpus(Environment(Vars{{"SLURM_CPUS_ON_NODE", "1"}})), 1);
  EXPECT_EQ(e3::job_cpus(Environment(Vars{{"SLURM_CPUS_ON_NODE", "100000"}})), e3::job_cpus(Environment{}));
  EXPECT_EQ(e3::job_cpus(Environment(Vars{{"SLURM_CPUS_ON_NODE", "many"}})), e3::job_cpus(Environment{}));
  EXPECT_GE(e3::usable_cpus(), 1);
  EXPECT_LE(e3::usable_cpus(), online);
}

}  // namespace
