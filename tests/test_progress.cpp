// Progress: the leader's lines (samples, tokens, bytes written, the slowest DP group) at most
// every interval, a last "finished" or "stopped" line, and nothing on other ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "jobs/progress.h"
#include "support/test_support.h"

namespace {

using e3::jobs::Progress;

// Captures what spdlog's default logger prints while it lives.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink->set_pattern("%v");
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("progress-test", sink));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }
  int lines() const {
    const std::string t = text();
    return static_cast<int>(std::count(t.begin(), t.end(), '\n'));
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::ostringstream out_;
};

TEST(Progress, ReportsTheJobAndItsSlowestGroup) {
  CapturedLog log;
  // Two groups of 100 and 400 tokens; 1000 bytes a token.
  Progress p(true, 10, {100, 400}, 1000, 0.0);
  p.update({3, 1}, {90, 80});
  EXPECT_TRUE(e3::test::Contains(log.text(), "progress: 4/10 samples (40.0%), 170/500 tokens"));
  EXPECT_TRUE(e3::test::Contains(log.text(), "0.00 GB written")) << "170 kB";
  EXPECT_TRUE(e3::test::Contains(log.text(), "slowest DP group 1 at 20.0%"));
  p.finish();
  EXPECT_TRUE(e3::test::Contains(log.text(), "finished: 4/10 samples"));
  EXPECT_EQ(log.lines(), 2);
}

TEST(Progress, AtMostOneLineAnIntervalButAlwaysTheLast) {
  CapturedLog log;
  Progress p(true, 4, {40}, 10, 1e9);
  p.update({1}, {10});
  p.update({2}, {20});
  EXPECT_EQ(log.lines(), 0);
  p.finish(true);
  EXPECT_TRUE(e3::test::Contains(log.text(), "stopped: 2/4 samples (50.0%), 20/40 tokens"));
  EXPECT_EQ(log.lines(), 1);
}

TEST(Progress, SilentOffTheLeader) {
  CapturedLog log;
  Progress p(false, 4, {40}, 10, 0.0);
  p.update({1}, {10});
  p.finish();
  EXPECT_EQ(log.text(), "");
}

}  // namespace
