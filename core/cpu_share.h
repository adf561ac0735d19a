// How many CPUs this process may use, against its share of the machine.
#pragma once

#include <optional>
#include <string>

namespace e3 {

// The CPUs in this process's affinity mask (what a launcher's binding or a cpuset leaves it),
// at least 1.
int usable_cpus();
// The machine's online CPUs, at least 1.
int machine_cpus();

// A warning for the log when a launcher bound this process to fewer CPUs than its share of the
// machine (machine / ranks_on_node) calls for: one CPU where the share is two or more, or under
// half the share. The threads that read, check and write the data then take turns on those
// CPUs, silently slower; nullopt otherwise.
std::optional<std::string> cpu_binding_warning(int usable, int machine, int ranks_on_node);

}  // namespace e3
