#include "parallel/mpi_env.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>

#include <utility>

#include "parallel/mpi_check.h"

namespace e3::parallel {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<size_t>(len));
}

bool started_alone(const Environment& env) {
  for (const char* launcher_variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_FD"})
    if (env.get(launcher_variable)) return false;
  return true;
}

namespace {

std::optional<int> positive_count(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  int value = 0;
  const char* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (ec != std::errc() || ptr != end || value < 1) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int> launched_processes(const Environment& env, long pid) {
  if (const auto n = positive_count(env.get("OMPI_COMM_WORLD_SIZE"))) return n;
  if (const auto n = positive_count(env.get("PMI_SIZE"))) return n;
  const std::optional<std::string> task_pid = env.get("SLURM_TASK_PID");
  if (env.get("SLURM_SRUN_COMM_PORT") && task_pid && *task_pid == std::to_string(pid))
    return positive_count(env.get("SLURM_STEP_NUM_TASKS"));
  return std::nullopt;
}

void require_world_of_launch(const Environment& env, int world_size) {
  const std::optional<int> launched = launched_processes(env, static_cast<long>(::getpid()));
  if (!launched || *launched == 1 || world_size != 1) return;
  E3_THROW(ErrorKind::Parallel,
           "the launcher started {} processes, but MPI made this one a world of its own, so each would run the "
           "whole job alone: under srun, name the MPI plugin this Open MPI was built for (srun --mpi=pmix, or "
           "--mpi=pmi2; `srun --mpi=list` lists them), or start the job with mpirun",
           *launched);
}

std::span<const EnvDefault> singleton_defaults() {
  static constexpr EnvDefault kDefaults[] = {
      {"OMPI_MCA_ess_singleton_isolated", "1"},
      {"OMPI_MCA_pml", "ob1"},
      {"OMPI_MCA_btl", "self"},
      // hwloc, which Open MPI asks for the machine's layout, would otherwise start CUDA, NVML and
      // OpenCL through its GPU plugins to place the GPUs in it: 0.3 s of a 0.35 s start on the GPU
      // machine (2026-12-05), for a layout a world of one never uses.
      {"HWLOC_COMPONENTS", "-cuda,-nvml,-opencl,-gl,-rsmi,-levelzero"},
  };
  return kDefaults;
}

MpiEnv::MpiEnv(int* argc, char*** argv, const Environment& env) {
  // Open MPI and hwloc read these from the environment; overwrite = 0 keeps the user's.
  if (started_alone(env))
    for (const EnvDefault& d : singleton_defaults()) setenv(d.name, d.value, 0);
  int provided = 0;
  // The main thread makes every collective; a watchdog thread may only ever call MPI_Abort,
  // which needs MULTIPLE to be legal from another thread.
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  // Errors are returned, not fatal, so that they become exceptions with a message.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
}

MpiEnv::~MpiEnv() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiEnv::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

void MpiEnv::abort_from_any_thread(int code) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided >= MPI_THREAD_MULTIPLE) MPI_Abort(MPI_COMM_WORLD, code);
  // Without thread support: exit; the launcher ends the job when a rank dies.
  _exit(code);
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

MpiComm::MpiComm(MpiComm&& other) noexcept : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    MpiComm dead(std::exchange(comm_, std::exchange(other.comm_, MPI_COMM_NULL)));
  }
  return *this;
}

int MpiComm::rank() const {
  int r = 0;
  E3_MPI_CHECK(MPI_Comm_rank(comm_, &r));
  return r;
}

int MpiComm::size() const {
  int s = 0;
  E3_MPI_CHECK(MPI_Comm_size(comm_, &s));
  return s;
}

namespace {

// The ranks of `comm` on this node, ordered as in `comm`.
MpiComm node_comm(MPI_Comm comm) {
  MPI_Comm local = MPI_COMM_NULL;
  E3_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local));
  return MpiComm(local);
}

}  // namespace

int ranks_on_node(MPI_Comm comm) { return node_comm(comm).size(); }

NodePlace node_place(MPI_Comm comm) {
  const MpiComm local = node_comm(comm);
  return {local.rank(), local.size()};
}

Grid::Grid(int tp_size) {
  E3_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  E3_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
  if (tp_size <= 0) tp_size = world_size_;
  E3_REQUIRE(world_size_ % tp_size == 0, ErrorKind::Usage,
             "--tp {} does not divide the {} MPI ranks of this job", tp_size, world_size_);
  tp_size_ = tp_size;
  tp_rank_ = world_rank_ % tp_size_;
  dp_size_ = world_size_ / tp_size_;
  dp_rank_ = world_rank_ / tp_size_;

  MPI_Comm tp = MPI_COMM_NULL;
  E3_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, dp_rank_, tp_rank_, &tp));
  tp_comm_ = MpiComm(tp);
  MPI_Comm_set_errhandler(tp, MPI_ERRORS_RETURN);

  MPI_Comm writers = MPI_COMM_NULL;
  E3_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, tp_rank_ == 0 ? 0 : MPI_UNDEFINED, dp_rank_, &writers));
  writers_comm_ = MpiComm(writers);

  const MpiComm local = node_comm(MPI_COMM_WORLD);
  local_rank_ = local.rank();
  local_size_ = local.size();

  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  E3_MPI_CHECK(MPI_Get_processor_name(name, &len));
  host_.assign(name, static_cast<size_t>(len));
}

std::string Grid::tag() const {
  return fmt::format("[r{}/{} tp{} dp{}]", world_rank_, world_size_, tp_rank_, dp_rank_);
}

}  // namespace e3::parallel
