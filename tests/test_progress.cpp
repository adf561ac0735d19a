// Progress: the leader's lines (samples, tokens, bytes written, the slowest DP group) at most
// every interval, a last "finished" or "stopped" line, and nothing on other ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <chrono>

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

// A step may take minutes (a large model on the CPU): the lines come on time between step
// boundaries too, saying which step runs.
TEST(Progress, PrintsOnTimeWhileAStepRuns) {
  CapturedLog log;
  Progress p(true, 10, {100}, 10, 0.05, 7);
  p.update({1}, {10});
  p.step_started(2);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!e3::test::Contains(log.text(), "step 3/7 running for") && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  p.finish(true);
  const std::string text = log.text();
  EXPECT_TRUE(e3::test::Contains(text, "progress: 1/10 samples (10.0%), 10/100 tokens")) << text;
  EXPECT_TRUE(e3::test::Contains(text, "step 3/7 running for")) << text;
  const std::string last = text.substr(text.rfind("\n", text.size() - 2) + 1);
  EXPECT_TRUE(e3::test::Contains(last, "stopped: 1/10 samples")) << "the last line is the last: " << text;
}

TEST(Progress, SilentOffTheLeader) {
  CapturedLog log;
  Progress p(false, 4, {40}, 10, 0.0);
  p.update({1}, {10});
  p.finish();
  EXPECT_EQ(log.text(), "");
}

}  // namespace
