#include "jobs/logging.h"

#include <algorithm>
#include <memory>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "core/error.h"

namespace e3::jobs {
namespace {

// The message of a log line, made printable (core/error.h) line by line: a message may span
// lines on purpose (the bad lines of a file, one per line), but no text it quotes can move a
// terminal's cursor or recolour the line, even where the code that built it forgot to escape it.
class PrintableMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string_view text(msg.payload.data(), msg.payload.size());
    for (size_t begin = 0;;) {
      const size_t end = std::min(text.find('\n', begin), text.size());
      const std::string line = printable(text.substr(begin, end - begin));
      dest.append(line.data(), line.data() + line.size());
      if (end == text.size()) return;
      dest.push_back('\n');
      begin = end + 1;
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PrintableMessage>(); }
};

}  // namespace

spdlog::level::level_enum spdlog_level(LogLevel level) {
  switch (level) {
    case LogLevel::Trace: return spdlog::level::trace;
    case LogLevel::Debug: return spdlog::level::debug;
    case LogLevel::Info: return spdlog::level::info;
    case LogLevel::Warn: return spdlog::level::warn;
    case LogLevel::Error: return spdlog::level::err;
  }
  E3_THROW(ErrorKind::Internal, "log level {}", static_cast<int>(level));
}

void install_rank_logger(const std::string& tag, spdlog::level::level_enum level,
                         const std::filesystem::path& log_file) {
  std::vector<spdlog::sink_ptr> sinks{std::make_shared<spdlog::sinks::stdout_sink_mt>()};
  if (!log_file.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(log_file.parent_path(), ec);
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file.string(), false));
    } catch (const spdlog::spdlog_ex& e) {
      E3_THROW(ErrorKind::Output, "--log-dir: cannot open {}: {}", log_file.string(), e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>("eagle3", sinks.begin(), sinks.end());
  // The tag is literal pattern text (it holds no %), fixed for the life of the process; %* is
  // the message, escaped.
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<PrintableMessage>('*').set_pattern("%Y-%m-%d %H:%M:%S.%e " + tag + " %l: %*");
  logger->set_formatter(std::move(formatter));
  logger->set_level(level);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
}

std::string rank_log_name(int world_rank, int part_index, int part_count) {
  if (part_count <= 1) return fmt::format("rank-{:05d}.log", world_rank);
  return fmt::format("part-{:04d}-of-{:04d}.rank-{:05d}.log", part_index, part_count, world_rank);
}

}  // namespace e3::jobs
