#include "core/cpu_share.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <thread>

#include <fmt/format.h>

namespace e3 {
namespace {

std::optional<int> parse_int(std::string_view text) {
  int value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The CPUs of this process's cgroup cpuset (v2, else v1), where one is there to read.
std::optional<int> cgroup_cpus() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::string file;
    if (line.compare(0, a, "0") == 0 && controllers.empty()) file = "/sys/fs/cgroup" + path + "/cpuset.cpus.effective";
    else if (("," + controllers + ",").find(",cpuset,") != std::string::npos)
      file = "/sys/fs/cgroup/cpuset" + path + "/cpuset.effective_cpus";
    else continue;
    if (const auto n = count_cpu_list(first_line(file)); n && *n > 0) return n;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> count_cpu_list(std::string_view list) {
  while (!list.empty() && (list.back() == '\n' || list.back() == ' ')) list.remove_suffix(1);
  if (list.empty()) return std::nullopt;
  int count = 0;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view range = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    const size_t dash = range.find('-');
    const auto lo = parse_int(range.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : parse_int(range.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo) return std::nullopt;
    count += *hi - *lo + 1;
  }
  return count;
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int job_cpus(const Environment& env) {
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (const auto n = cgroup_cpus()) cpus = std::min(cpus, *n);
  if (const auto slurm = env.get("SLURM_CPUS_ON_NODE"))
    if (const auto n = parse_int(*slurm); n && *n > 0) cpus = std::min(cpus, *n);
  return cpus;
}

std::optional<std::string> cpu_binding_warning(int usable, int job, int ranks_on_node) {
  const int share = std::max(1, job / std::max(1, ranks_on_node));
  if (!((usable == 1 && share >= 2) || usable < share / 2)) return std::nullopt;
  return fmt::format(
      "this rank may run on {} of the {} CPUs this job has on the node, where its share ({} rank{} on the node) is {}: "
      "its launcher (or taskset) bound it (Open MPI's mpirun binds each rank to one core when it starts one or two), so "
      "its reading, checking and writing threads take turns on {}; `mpirun --bind-to none`, or "
      "`srun --cpus-per-task={}`, gives it its share",
      usable, job, ranks_on_node, ranks_on_node == 1 ? "" : "s", share, usable == 1 ? "one CPU" : "them", share);
}

}  // namespace e3
