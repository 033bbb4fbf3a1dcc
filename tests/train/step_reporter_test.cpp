// The step reporter on its own, without a model or a training run: steps fed as tensors
// come out as metrics.jsonl rows with their loss terms by name, and the non-finite policy
// counts exactly the non-finite steps and stops one past max_bad_steps.
#include "siamese/train/step_reporter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <vector>

#include "siamese/common/metrics_row.h"
#include "siamese/train/trainer.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace fs = std::filesystem;
using namespace siamese;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const torch::Device kCpu(torch::kCPU);

struct StepNumbers {
  double loss = 2.5, z_loss = 0.01, aux = 0.125, grad_norm = 0.75, loss_scale = 1;
};

torch::Tensor f64(double v) { return torch::tensor(v, torch::kFloat64); }

std::vector<nlohmann::json> metrics_rows(const fs::path& dir) {
  std::vector<nlohmann::json> out;
  if (!fs::exists(dir / "metrics.jsonl")) return out;
  read_metrics_rows((dir / "metrics.jsonl").string(),
                    [&](const nlohmann::json& row, const std::string&) { out.push_back(row); });
  return out;
}

class StepReporterTest : public ::testing::Test {
 protected:
  StepReporterTest()
      : dir_(siamese::testing::fresh_dir("step_reporter",
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name())),
        cfg_(siamese::testing::tiny(dir_)) {}

  // Step `step` as a training step leaves it: loss, z_loss, a block's auxiliary term and a
  // block's counts (a tensor).
  train::PendingStep pending(train::StepReporter& reporter, int64_t step, const StepNumbers& v = {}) {
    train::PendingStep p;
    p.step = step;
    p.tokens = step * 128;
    p.lr = 1e-3 * double(step);
    p.elapsed = 0.5 * double(step);
    p.result.values.add(metric::kLoss, f64(v.loss));
    p.result.values.add(metric::kZLoss, f64(v.z_loss));
    p.result.values.add("router_aux", f64(v.aux));
    p.result.values.add("router_counts", torch::arange(1, 7, torch::kFloat64).reshape({2, 3}) * double(step));
    p.result.grad_norm = f64(v.grad_norm);
    p.result.loss_scale = f64(v.loss_scale);
    p.start_mark = reporter.clock().mark();
    p.end_mark = reporter.clock().mark();
    return p;
  }
  // Adds one step and flushes it.
  int report(train::StepReporter& reporter, int64_t step, const StepNumbers& v = {}) {
    reporter.add(pending(reporter, step, v));
    return reporter.flush(state_, scaler_);
  }

  fs::path dir_;
  config::TrainConfig cfg_;
  train::TrainState state_;
  train::LossScaler scaler_{false, 1.0, 1000, kCpu};
};

TEST_F(StepReporterTest, ARowPerStepWithEveryLossTermByName) {
  {
    train::StepReporter reporter(config::report_section(cfg_), kCpu, true, 1, dir_, 0, 8);
    EXPECT_TRUE(reporter.read_due(1)) << "on the CPU every step is a read point";
    EXPECT_EQ(reporter.read_interval(), 1);
    reporter.add(pending(reporter, 1));
    reporter.add(pending(reporter, 2, {3.0, 0.02, 0.25, 1.5, 1}));
    EXPECT_TRUE(metrics_rows(dir_).empty()) << "nothing is written before the read point";
    EXPECT_EQ(reporter.flush(state_, scaler_), 0);
    EXPECT_EQ(reporter.flush(state_, scaler_), 0) << "flushed steps are not written twice";
  }
  const auto r = metrics_rows(dir_);
  ASSERT_EQ(r.size(), 2u);
  for (const auto& row : r) EXPECT_FALSE(row.contains(metric::kEvent)) << row.dump();
  EXPECT_EQ(r[0]["step"], 1);
  EXPECT_EQ(r[0]["tokens"], 128);
  EXPECT_DOUBLE_EQ(r[0]["loss"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(r[0]["z_loss"].get<double>(), 0.01);
  EXPECT_DOUBLE_EQ(r[0]["router_aux"].get<double>(), 0.125);
  EXPECT_EQ(r[0]["router_counts"], nlohmann::json::parse("[[1, 2, 3], [4, 5, 6]]"))
      << "a tensor in its shape";
  EXPECT_EQ(r[1]["router_counts"], nlohmann::json::parse("[[2, 4, 6], [8, 10, 12]]"));
  EXPECT_DOUBLE_EQ(r[0]["grad_norm"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(r[0]["lr"].get<double>(), 1e-3);
  EXPECT_FALSE(r[0].contains("loss_scale")) << "without amp_fp16 there is no scale to report";
  EXPECT_EQ(r[1]["step"], 2);
  EXPECT_DOUBLE_EQ(r[1]["loss"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(r[1]["z_loss"].get<double>(), 0.02);
  EXPECT_DOUBLE_EQ(r[1]["router_aux"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(r[1]["grad_norm"].get<double>(), 1.5);
  EXPECT_EQ(state_.bad_steps, 0);
}

TEST_F(StepReporterTest, OnlyTheMainRankWritesRows) {
  train::StepReporter reporter(config::report_section(cfg_), kCpu, false, 2, dir_, 0, 8);
  EXPECT_EQ(report(reporter, 1), 0);
  EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl"));
}

TEST_F(StepReporterTest, NonFiniteStepsAreCountedAndOnePastMaxBadStepsStops) {
  cfg_.max_bad_steps = 2;
  {
    train::StepReporter reporter(config::report_section(cfg_), kCpu, true, 1, dir_, 0, 8);
    EXPECT_EQ(report(reporter, 1), 0);
    EXPECT_EQ(state_.bad_steps, 0) << "a finite step is not counted";
    EXPECT_EQ(report(reporter, 2, {kNaN}), 0);
    EXPECT_EQ(state_.bad_steps, 1);
    EXPECT_EQ(report(reporter, 3), 0);
    EXPECT_EQ(state_.bad_steps, 1);
    EXPECT_EQ(report(reporter, 4, {2.5, 0.01, 0.125, kInf}), 0);
    EXPECT_EQ(state_.bad_steps, 2) << "a non-finite gradient norm counts as well";
    EXPECT_EQ(report(reporter, 5, {2.5, kInf}), kExitNonFinite) << "the third with max_bad_steps 2";
    EXPECT_EQ(state_.bad_steps, 2);
  }
  const auto r = metrics_rows(dir_);
  std::vector<int64_t> training, nonfinite;
  std::vector<std::string> causes;
  for (const auto& row : r) {
    if (!row.contains(metric::kEvent)) {
      training.push_back(row["step"].get<int64_t>());
    } else if (row[metric::kEvent] == metric::kNonfiniteEvent) {
      nonfinite.push_back(row["step"].get<int64_t>());
      causes.push_back(row["cause"].get<std::string>());
    }
  }
  EXPECT_EQ(training, (std::vector<int64_t>{1, 3})) << "a skipped step has no training row";
  EXPECT_EQ(nonfinite, (std::vector<int64_t>{2, 4, 5}));
  EXPECT_EQ(causes, (std::vector<std::string>{"loss", "grad_norm", "z_loss"}));
}

TEST_F(StepReporterTest, WithNoBadStepsAllowedTheFirstNonFiniteStepStops) {
  ASSERT_EQ(cfg_.max_bad_steps, 0);
  train::StepReporter reporter(config::report_section(cfg_), kCpu, true, 1, dir_, 0, 8);
  EXPECT_EQ(report(reporter, 1), 0);
  EXPECT_EQ(report(reporter, 2, {kInf}), kExitNonFinite);
  EXPECT_EQ(state_.bad_steps, 0);
}

TEST_F(StepReporterTest, AnFp16OverflowWhileTheScaleSettlesIsNotABadStep) {
  train::LossScaler fp16(true, 65536.0, 1000, kCpu);
  train::StepReporter reporter(config::report_section(cfg_), kCpu, true, 1, dir_, 0, 8);
  reporter.add(pending(reporter, 1, {2.5, 0.01, 0.125, kInf, 65536}));
  EXPECT_EQ(reporter.flush(state_, fp16), 0);
  EXPECT_EQ(state_.bad_steps, 0);
  const auto r = metrics_rows(dir_);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0][metric::kEvent], "overflow");
  // At a scale of 1 nothing is left to lower: the gradients themselves overflowed.
  reporter.add(pending(reporter, 2, {2.5, 0.01, 0.125, kInf, 1}));
  EXPECT_EQ(reporter.flush(state_, fp16), kExitNonFinite);
}

}  // namespace
