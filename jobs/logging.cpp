#include "jobs/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include "kernels/error.h"

namespace e3::jobs {

spdlog::level::level_enum parse_log_level(const std::string& name) {
  if (name == "trace") return spdlog::level::trace;
  if (name == "debug") return spdlog::level::debug;
  if (name == "info") return spdlog::level::info;
  if (name == "warn") return spdlog::level::warn;
  if (name == "error") return spdlog::level::err;
  E3_THROW(ErrorKind::Usage, "--log-level must be trace, debug, info, warn or error, not '{}'", name);
}

void install_rank_logger(const std::string& tag, spdlog::level::level_enum level) {
  auto sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("eagle3", sink);
  // The tag is literal pattern text (it holds no %), fixed for the life of the process.
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e " + tag + " %l: %v");
  logger->set_level(level);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace e3::jobs
