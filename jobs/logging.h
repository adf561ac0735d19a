// The rank-tagged logger: every line carries "[r3/8 tp3 dp0]", goes to stdout and is
// flushed at once, so mpirun/srun merge whole lines and nothing is lost before an abort.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "jobs/option_names.h"

namespace e3::jobs {

// --log-level as spdlog's level.
spdlog::level::level_enum spdlog_level(LogLevel level);

// Creates the logger and makes it spdlog's default, so every library logs through it. With a
// `log_file`, every line also goes there (appended, so a resumed run adds to its history).
void install_rank_logger(const std::string& tag, spdlog::level::level_enum level,
                         const std::filesystem::path& log_file = {});

// "rank-00003.log", or "part-0001-of-0004.rank-00003.log" when jobs share a --log-dir.
std::string rank_log_name(int world_rank, int part_index, int part_count);

}  // namespace e3::jobs
