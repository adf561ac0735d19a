// The rank logger: whatever a message quotes, a log line cannot carry a control character.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <spdlog/spdlog.h>

#include "jobs/logging.h"
#include "support/test_support.h"

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(RankLogger, EscapesControlCharactersButKeepsTheLinesOfAMessage) {
  e3::test::TempDir dir;
  const auto previous = spdlog::default_logger();
  e3::jobs::install_rank_logger("[r0/1]", spdlog::level::info, dir / "rank.log");
  spdlog::warn("unescaped \"x\x1b[2K\r[r0/1] critical: boom\"\nsecond\tline \xc2\x9b");
  spdlog::set_default_logger(previous);
  const std::string text = read_file(dir / "rank.log");
  EXPECT_NE(text.find(" [r0/1] warning: unescaped \"x\\u001b[2K\\r[r0/1] critical: boom\"\nsecond\\tline \\u009b\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

}  // namespace
