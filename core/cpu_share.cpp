#include "core/cpu_share.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include <fmt/format.h>

namespace e3 {

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return machine_cpus();
}

int machine_cpus() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

std::optional<std::string> cpu_binding_warning(int usable, int machine, int ranks_on_node) {
  const int share = std::max(1, machine / std::max(1, ranks_on_node));
  if (!((usable == 1 && share >= 2) || usable < share / 2)) return std::nullopt;
  return fmt::format(
      "this rank may run on {} of the machine's {} CPUs, where its share ({} rank{} on this node) is {}: its launcher "
      "bound it (Open MPI's mpirun binds each rank to one core when it starts one or two; srun gives each task "
      "--cpus-per-task CPUs, 1 unless set), so its reading, checking and writing threads take turns on {}; "
      "`mpirun --bind-to none`, or `srun --cpus-per-task={}`, gives it its share",
      usable, machine, ranks_on_node, ranks_on_node == 1 ? "" : "s", share, usable == 1 ? "one CPU" : "them", share);
}

}  // namespace e3
