// The rank-tagged logger: every line carries "[r3/8 tp3 dp0]", goes to stdout and is
// flushed at once, so mpirun/srun merge whole lines and nothing is lost before an abort.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace e3::jobs {

// Throws a usage error for anything but trace|debug|info|warn|error.
spdlog::level::level_enum parse_log_level(const std::string& name);

// Creates the logger and makes it spdlog's default, so every library logs through it.
void install_rank_logger(const std::string& tag, spdlog::level::level_enum level);

}  // namespace e3::jobs
