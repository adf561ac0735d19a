// How many CPUs this process may use, against its share of what the job has on the node.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/environment.h"

namespace e3 {

// The CPUs in this process's affinity mask (what a launcher's binding, taskset or a cpuset
// leaves it), at least 1.
int usable_cpus();
// The CPUs the job may use on this node, at least 1: the online CPUs, or fewer where the
// process's cgroup has a cpuset (a container's --cpuset-cpus, Slurm's task/cgroup) or Slurm says
// how many it allocated on the node (SLURM_CPUS_ON_NODE).
int job_cpus(const Environment& env);
// The CPUs a cpuset list names ("0-3,8,10-11" is 7); nullopt when it is not one.
std::optional<int> count_cpu_list(std::string_view list);

// A warning for the log when a launcher bound this process to fewer CPUs than its share of the
// job's (job_cpus / ranks_on_node) calls for: one CPU where the share is two or more, or under
// half the share. The threads that read, check and write the data then take turns on those
// CPUs, silently slower; nullopt otherwise.
std::optional<std::string> cpu_binding_warning(int usable, int job, int ranks_on_node);

}  // namespace e3
