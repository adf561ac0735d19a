// Watchdog: a step over --collective-timeout, or an asynchronous communicator failure, ends
// the job with one message naming what was stuck; a step that ended, or one within its time,
// does not. The clock is the test's, and the test waits for the watchdog's checks, not for time.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>

#include "jobs/watchdog.h"
#include "support/step_rig.h"
#include "support/test_support.h"

namespace {

using e3::jobs::Watchdog;

class FakeComm final : public e3::parallel::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "fake"; }
  void all_reduce_sum(e3::kernels::Tensor) override {}
  std::string async_error() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  void fail(const std::string& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = e;
  }

 private:
  std::mutex mutex_;
  std::string error_;
};

class WatchdogTest : public ::testing::Test {
 protected:
  Watchdog::Options options() {
    Watchdog::Options o;
    o.poll_s = 0.001;
    o.now_ns = [this] { return now_ns_.load(); };
    o.on_failure = [this](const std::string& message) {
      std::lock_guard<std::mutex> lock(mutex_);
      failures_.push_back(message);
    };
    return o;
  }
  std::vector<std::string> failures() {
    std::lock_guard<std::mutex> lock(mutex_);
    return failures_;
  }
  // Lets the watchdog look again at least twice.
  void let_it_check(const Watchdog& w) {
    const int64_t seen = w.checks();
    ASSERT_TRUE(e3::test::eventually([&] { return w.checks() >= seen + 2; }));
  }
  FakeComm comm_;
  std::atomic<int64_t> now_ns_{0};
  std::mutex mutex_;
  std::vector<std::string> failures_;
};

TEST_F(WatchdogTest, AStepOverTheTimeoutEndsTheJobNamingIt) {
  Watchdog w(comm_, 2.0, 5, options());
  w.step_begin(7);
  now_ns_ = 1'500'000'000;  // within the limit
  let_it_check(w);
  EXPECT_TRUE(failures().empty());
  now_ns_ = 2'500'000'000;
  ASSERT_TRUE(e3::test::eventually([&] { return !failures().empty(); }));
  EXPECT_TRUE(e3::test::Contains(failures()[0], "step 7 did not finish within --collective-timeout 2 s"));
  EXPECT_EQ(failures().size(), 1u);
}

TEST_F(WatchdogTest, TimeBetweenStepsDoesNotCount) {
  Watchdog w(comm_, 1.0, 0, options());
  w.step_begin(0);
  w.step_end();
  now_ns_ = 1'000'000'000'000;
  let_it_check(w);
  EXPECT_TRUE(failures().empty());
  w.step_begin(1);  // the clock restarts with each step
  let_it_check(w);
  EXPECT_TRUE(failures().empty());
}

TEST_F(WatchdogTest, ACommunicatorFailureEndsTheJobNamingIt) {
  Watchdog w(comm_, 600.0, 0, options());
  let_it_check(w);
  EXPECT_TRUE(failures().empty());
  comm_.fail("unhandled cuda error");
  ASSERT_TRUE(e3::test::eventually([&] { return !failures().empty(); }));
  EXPECT_EQ(failures()[0], "fake communicator failed: unhandled cuda error");
}

}  // namespace
