// The console sink on its own, fed metrics rows: a progress line after the first step, at
// each console_log_interval and at the last step, nothing for event rows or rows without a
// loss, and the two duration estimates once each.
#include "siamese/train/console_log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

namespace siamese::train {
namespace {

MetricsRow step_row(int64_t step, double elapsed) {
  return metrics_row(step, "",
                     {{metric::kLoss, 3.25},
                      {metric::kLearningRate, 1e-3},
                      {"grad_norm", 0.5},
                      {"tokens_per_sec", 1000.0},
                      {"mfu", nullptr},
                      {"peak_memory_mib", 12.0},
                      {"elapsed", elapsed}});
}

class ConsoleLogTest : public ::testing::Test {
 protected:
  ConsoleLogTest()
      : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64)), saved_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("console_log_test", sink_);
    logger->set_pattern("%v");
    spdlog::set_default_logger(logger);
  }
  ~ConsoleLogTest() override { spdlog::set_default_logger(saved_); }
  std::vector<std::string> lines() { return sink_->last_formatted(); }

  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> saved_;
};

TEST_F(ConsoleLogTest, ProgressLinesAtTheFirstStepEachIntervalAndTheLast) {
  ConsoleLog console(4, 0, 10);
  for (int64_t step = 1; step <= 10; ++step) console.write(step_row(step, 2.0 + double(step - 1)));
  console.write(
      metrics_row(10, metric::kNonfiniteEvent, {{"cause", "loss"}, {"loss", 1.0}, {"grad_norm", 1.0}}));
  console.write(metrics_row(10, "", {{"layer_grad_norms", {1.0, 2.0}}}));
  std::vector<std::string> progress;
  int first_estimates = 0, warm_estimates = 0;
  for (const auto& l : lines()) {
    if (l.rfind("[", 0) == 0) progress.push_back(l.substr(0, l.find(']') + 1));
    first_estimates += l.rfind("expected duration at the first step's speed", 0) == 0;
    warm_estimates += l.rfind("expected duration after warm-up", 0) == 0;
  }
  EXPECT_EQ(progress, (std::vector<std::string>{"[1/10]", "[4/10]", "[8/10]", "[10/10]"}));
  EXPECT_EQ(first_estimates, 1);
  EXPECT_EQ(warm_estimates, 1);
  // Step 4's estimate leaves the first step (2 s of warm-up) out: 1 s a step, 6 steps left.
  bool found = false;
  for (const auto& l : lines())
    if (l.rfind("[4/10]", 0) == 0) {
      found = true;
      EXPECT_NE(l.find("loss 3.2500 nats/token"), std::string::npos) << l;
      EXPECT_NE(l.find("ETA 0m06s"), std::string::npos) << l;
      EXPECT_EQ(l.find("MFU"), std::string::npos) << "no peak_tflops, no MFU: " << l;
    }
  EXPECT_TRUE(found);
}

TEST(FormatEta, MinutesBelowAnHourHoursAbove) {
  EXPECT_EQ(format_eta(249), "4m09s");
  EXPECT_EQ(format_eta(3900), "1h05m");
}

}  // namespace
}  // namespace siamese::train
