// The stop policy on its own, without a training run: a stop signal is caught and turned
// into Stop::Signal, the time limit stops while the final save still fits, and
// RunControl::stop_at names exactly one step.
#include "siamese/train/stop_policy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "siamese/train/trainer.h"

using namespace siamese;
using train::StopPolicy;

namespace {

using SteadyClock = std::chrono::steady_clock;

const char* stop_name(StopPolicy::Stop s) {
  switch (s) {
    case StopPolicy::Stop::None:
      return "None";
    case StopPolicy::Stop::Signal:
      return "Signal";
    case StopPolicy::Stop::TimeLimit:
      return "TimeLimit";
  }
  return "?";
}

SteadyClock::time_point seconds_ago(double s) {
  return SteadyClock::now() -
         std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

// The policy installs its handlers on construction; the test binary gets its default ones back.
class StopPolicyTest : public ::testing::Test {
 protected:
  void TearDown() override {
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGINT, SIG_DFL);
  }
  config::TrainConfig cfg_;
  dist::OneProcess one_process_;
};

// In a child (the stop flag is process-global and has no reset): raises `sig` after the
// handlers are installed, then reports what the flag and the policy say on stderr. The child
// exits 0 only when it survived the signal.
[[noreturn]] void raise_and_check(int sig) {
  config::TrainConfig cfg;
  cfg.time_limit = 1e9;  // a signal stops the run whatever the time limit says
  dist::OneProcess one_process;
  StopPolicy stops(cfg.time_limit, one_process, -1, SteadyClock::now());
  const int before = train::stop_signal();
  const auto quiet = stops.check(1, 0, SteadyClock::now(), 1, 0);
  std::raise(sig);
  const int after = train::stop_signal();
  const auto stop = stops.check(2, 0, SteadyClock::now(), 1, 0);
  std::fprintf(stderr, "before %d %s, after %d %s, policy signal %d\n", before, stop_name(quiet), after,
               stop_name(stop), stops.signal());
  std::fflush(stderr);
  std::_Exit(0);
}

TEST_F(StopPolicyTest, SigtermIsCaughtAndStopsTheRunAtTheNextCheck) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(raise_and_check(SIGTERM), ::testing::ExitedWithCode(0),
              "before 0 None, after " + std::to_string(SIGTERM) + " Signal, policy signal " +
                  std::to_string(SIGTERM));
}

TEST_F(StopPolicyTest, SigintIsCaughtAndStopsTheRunAtTheNextCheck) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      raise_and_check(SIGINT), ::testing::ExitedWithCode(0),
      "before 0 None, after " + std::to_string(SIGINT) + " Signal, policy signal " + std::to_string(SIGINT));
}

TEST_F(StopPolicyTest, WithoutHandlersSigtermStillKillsTheProcess) {
  // What the two tests above would see if install_stop_handlers did nothing.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::raise(SIGTERM), ::testing::KilledBySignal(SIGTERM), "");
}

// Started 100 s ago, the loop 50 s ago at step 0, now after step 10: 5 s a step. With a read
// every 2 steps the next check comes at 110 s; a save of 20 s then ends at 130 s.
TEST_F(StopPolicyTest, TimeLimitStopsWhileTheSaveStillFits) {
  const auto started = seconds_ago(100), loop_start = seconds_ago(50);
  auto check = [&](double limit, int64_t first_step, int64_t read_interval, double save_seconds) {
    cfg_.time_limit = limit;
    StopPolicy stops(cfg_.time_limit, one_process_, -1, started);
    return stops.check(10, first_step, loop_start, read_interval, save_seconds);
  };
  EXPECT_EQ(check(131, 0, 2, 20), StopPolicy::Stop::None) << "130 s fits in 131";
  EXPECT_EQ(check(129, 0, 2, 20), StopPolicy::Stop::TimeLimit) << "the save would end past 129 s";
  EXPECT_EQ(check(129, 0, 2, 0), StopPolicy::Stop::None) << "without the save the next check is at 110 s";
  EXPECT_EQ(check(111, 0, 2, 0), StopPolicy::Stop::None);
  EXPECT_EQ(check(109, 0, 2, 0), StopPolicy::Stop::TimeLimit) << "the next check would be past 109 s";
  EXPECT_EQ(check(119, 0, 4, 0), StopPolicy::Stop::TimeLimit) << "4 steps to the next check: 120 s";
  EXPECT_EQ(check(121, 0, 4, 0), StopPolicy::Stop::None) << "4 steps to the next check: 120 s";
  // A resumed loop that began at step 8: 25 s a step, the next check at 150 s.
  EXPECT_EQ(check(149, 8, 2, 0), StopPolicy::Stop::TimeLimit);
  EXPECT_EQ(check(151, 8, 2, 0), StopPolicy::Stop::None);
  EXPECT_EQ(check(99, 0, 1, 0), StopPolicy::Stop::TimeLimit) << "already past the limit";
}

TEST_F(StopPolicyTest, WithoutATimeLimitOnlyASignalStops) {
  ASSERT_FALSE(cfg_.time_limit);
  StopPolicy stops(cfg_.time_limit, one_process_, -1, seconds_ago(1e6));
  EXPECT_EQ(stops.check(10, 0, seconds_ago(1e6), 100, 1e6), StopPolicy::Stop::None);
  EXPECT_EQ(stops.signal(), 0);
}

TEST_F(StopPolicyTest, StopAtIsRequestedAtThatStepOnly) {
  StopPolicy stops(cfg_.time_limit, one_process_, 5, SteadyClock::now());
  EXPECT_TRUE(stops.requested(5));
  EXPECT_FALSE(stops.requested(4));
  EXPECT_FALSE(stops.requested(6));
  // A stop_at step is not a stop by check(): the loop saves and returns 0, not kExitStopped.
  EXPECT_EQ(stops.check(5, 0, SteadyClock::now(), 1, 0), StopPolicy::Stop::None);

  const train::RunControl none;  // the default: no step asked for
  StopPolicy never(cfg_.time_limit, one_process_, none.stop_at, SteadyClock::now());
  for (int64_t step = 0; step <= 1000; ++step) EXPECT_FALSE(never.requested(step)) << step;
}

}  // namespace
