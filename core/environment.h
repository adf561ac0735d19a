// The process environment as eagle3_extract sees it: a snapshot of the variables it reads,
// taken once at start-up (app/cli.cpp) and carried from there (RunConfig::env,
// BenchOptions::env). Nothing else reads the environment, so a test states a job's
// environment by building one of these.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace e3 {

class Environment {
 public:
  // Every variable the program reads: the Slurm array's position (--part slurm) and job id
  // (named in the lock file), the GPUs shown (the start-up line), the CUDA backend's knobs
  // (kernels/cuda_options.h), the tests' fault injection (jobs/run_config.h), mpirun's kill
  // timeout (named when it stops the job), whether
  // `tokenize --show` may colour its output (NO_COLOR), and the variables a launcher (mpirun, srun)
  // gives each rank, whose absence marks a process started on its own, and how many processes it
  // started (parallel/mpi_env.h).
  static constexpr const char* kVariables[] = {
      "SLURM_ARRAY_TASK_ID",   "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",  "SLURM_ARRAY_TASK_STEP",
      "SLURM_ARRAY_TASK_COUNT", "SLURM_JOB_ID",        "CUDA_VISIBLE_DEVICES",  "E3_GEMM_VARIANT",
      "E3_ATTENTION_VARIANT",  "E3_L2_SIDES",
      "E3_MOE_UNFUSED",        "E3_PROFILE",           "E3_FAIL_AT_SAMPLE",     "E3_FAIL_ON_RANK",
      "E3_FAIL_PUBLISH_SHARD", "E3_STEP_DELAY_MS",    "OMPI_MCA_odls_base_sigkill_timeout", "NO_COLOR",
      "OMPI_COMM_WORLD_SIZE",  "PMIX_RANK",            "PMI_RANK",              "PMI_FD",
      "PMI_SIZE",              "SLURM_STEP_NUM_TASKS", "SLURM_SRUN_COMM_PORT",  "SLURM_TASK_PID",
      "SLURM_CPUS_ON_NODE"};

  Environment() = default;  // nothing set
  // These variables set to these values (tests). Each name must be one of kVariables.
  explicit Environment(std::map<std::string, std::string> vars);
  // This process's: the one place that reads the environment.
  static Environment of_process();

  // The value of `name`, one of kVariables: nullopt when unset, "" when set but empty. Any
  // other name is an internal error, so that a variable read here is always in the snapshot.
  std::optional<std::string> get(const std::string& name) const;

 private:
  std::map<std::string, std::string> vars_;
};

}  // namespace e3
