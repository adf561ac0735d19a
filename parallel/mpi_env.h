// MPI for the lifetime of the process (RAII), and the TP x DP grid of ranks.
#pragma once

#include <mpi.h>

#include <optional>
#include <span>
#include <string>

#include "core/environment.h"

namespace e3::parallel {

// Whether no launcher (mpirun, srun, a PMI or PMIx server) started this process: it will be
// a world of one, an MPI singleton.
bool started_alone(const Environment& env);

// How many processes the launcher says it started, where it says so: mpirun's
// OMPI_COMM_WORLD_SIZE, a PMI launcher's PMI_SIZE (MPICH's hydra, srun --mpi=pmi2), or srun's
// SLURM_STEP_NUM_TASKS for a process that srun started itself (SLURM_SRUN_COMM_PORT set and
// SLURM_TASK_PID the process's own `pid`): a program run from a shell that srun started
// (`srun -n 8 --pty bash`) inherits those variables without being one of the step's tasks, and
// mpirun under Slurm gives its ranks OMPI_* first.
std::optional<int> launched_processes(const Environment& env, long pid);

// Throws (ErrorKind::Parallel) when the launcher started several processes but MPI made this one
// a world of its own: srun without the MPI plugin that this Open MPI speaks. Each process would
// otherwise run the whole job alone, all of them into the same output directory.
void require_world_of_launch(const Environment& env, int world_size);

// A variable that a process started alone sets before MPI_Init unless it is set already.
struct EnvDefault {
  const char* name;
  const char* value;
};
// Those variables (MpiEnv says why each).
std::span<const EnvDefault> singleton_defaults();

// Initialises MPI on construction and finalises it on destruction.
//
// A process started alone gets four defaults first, each unless the user set it: no Open MPI
// helper daemon (ess_singleton_isolated; it would only serve MPI_Comm_spawn), the ob1
// messaging layer (pml; UCX's start probes the network for peers a world of one cannot have),
// only the self transport under it (btl; a world of one sends to itself only, and the
// InfiniBand transport would otherwise probe the host's adapters and may warn about them), and
// hwloc without its GPU plugins (HWLOC_COMPONENTS; they start CUDA, NVML and OpenCL only to
// place the GPUs in a machine layout that a world of one never uses).
// Together they take MPI_Init from 0.40 s to 0.04 s on the 2-core build machine, and the start of
// `--version` on the GPU machine from 0.31-0.75 s to 0.03-0.11 s, which every `export`, `verify`
// and `stats` paid.
class MpiEnv {
 public:
  MpiEnv(int* argc, char*** argv, const Environment& env);
  ~MpiEnv();
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // Every rank of the job: the communicator of commands that need no TP x DP grid.
  MPI_Comm world() const { return MPI_COMM_WORLD; }
  // Ends every rank of the job now with `code`. Never returns.
  [[noreturn]] static void abort(int code);
  // The same from a thread other than the main one (the collective watchdog).
  [[noreturn]] static void abort_from_any_thread(int code);
  bool thread_multiple() const { return thread_multiple_; }

 private:
  bool thread_multiple_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
};

// An owned communicator (move-only); MPI_COMM_NULL when empty.
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  ~MpiComm();
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MpiComm(MpiComm&& other) noexcept;
  MpiComm& operator=(MpiComm&& other) noexcept;

  MPI_Comm get() const { return comm_; }
  int rank() const;
  int size() const;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// How many ranks of `comm` run on this node (a collective over `comm`), so that they can share
// its cores.
int ranks_on_node(MPI_Comm comm);
// This rank's place among the ranks of `comm` on its node (a collective over `comm`).
struct NodePlace {
  int rank = 0;   // 0 for the node's first
  int ranks = 1;  // ranks_on_node
};
NodePlace node_place(MPI_Comm comm);

// World ranks split into DP groups of `tp` consecutive ranks: tp_rank = world % tp,
// dp_rank = world / tp. Also the node-local rank (for choosing a GPU) and the host name.
class Grid {
 public:
  // Throws a usage error when tp does not divide the world size.
  Grid(int tp_size);

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int tp_rank() const { return tp_rank_; }
  int tp_size() const { return tp_size_; }
  int dp_rank() const { return dp_rank_; }
  int dp_size() const { return dp_size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }

  MPI_Comm world() const { return MPI_COMM_WORLD; }
  MPI_Comm tp_comm() const { return tp_comm_.get(); }
  // Ranks with tp_rank == 0, one per DP group: the writers. MPI_COMM_NULL elsewhere.
  MPI_Comm writers_comm() const { return writers_comm_.get(); }
  bool is_writer() const { return tp_rank_ == 0; }
  bool is_leader() const { return world_rank_ == 0; }

  // "[r1/2 tp1 dp0]"
  std::string tag() const;

 private:
  int world_rank_ = 0, world_size_ = 1;
  int tp_rank_ = 0, tp_size_ = 1;
  int dp_rank_ = 0, dp_size_ = 1;
  int local_rank_ = 0, local_size_ = 1;
  std::string host_;
  MpiComm tp_comm_;
  MpiComm writers_comm_;
};

}  // namespace e3::parallel
