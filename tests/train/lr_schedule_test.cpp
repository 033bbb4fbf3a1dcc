// Expected values are OLMo's formulas (olmo/optim.py) evaluated by hand for peak 1e-3,
// t_warmup 10, t_max 110, alpha_f 0.1 (eta_min 1e-4, default warmup_min_lr 1e-4).
#include <gtest/gtest.h>

#include "siamese/common/error.h"
#include "siamese/train/lr_schedule.h"

using siamese::config::SchedulerConfig;
using siamese::train::learning_rate;
namespace config = siamese::config;

namespace {

config::SchedulerConfig sched(const std::string& name) {
  config::SchedulerConfig c;
  c.name = *siamese::config::enum_named<siamese::config::SchedulerName>(name);
  c.t_warmup = 10;
  c.t_max = 110;
  c.alpha_f = 0.1;
  return c;
}

void expect_curve(const config::SchedulerConfig& c, const std::vector<std::pair<double, double>>& points) {
  for (auto [t, lr] : points)
    EXPECT_NEAR(learning_rate(c, 1e-3, t, 1e9), lr, 1e-12) << c.name << " at t=" << t;
}

}  // namespace

TEST(LrSchedule, CosineWithWarmup) {
  expect_curve(sched("cosine_with_warmup"), {{0, 1e-4},
                                             {5, 5.5e-4},
                                             {10, 1e-3},
                                             {35, 8.681980515339464e-4},  // progress 1/4
                                             {60, 5.5e-4},
                                             {85, 2.318019484660536e-4},
                                             {110, 1e-4},
                                             {500, 1e-4}});
}

TEST(LrSchedule, LinearWithWarmup) {
  expect_curve(sched("linear_with_warmup"),
               {{1, 1.9e-4}, {10, 1e-3}, {35, 7.75e-4}, {60, 5.5e-4}, {109, 1.09e-4}, {110, 1e-4}});
}

TEST(LrSchedule, InverseSqrtWithWarmup) {
  expect_curve(sched("inverse_sqrt_with_warmup"),
               {{5, 5.5e-4}, {10, 1e-3}, {40, 5e-4}, {90, 3.333333333333333e-4}, {1000, 1e-4}});
}

TEST(LrSchedule, ConstantAndConstantWithWarmup) {
  expect_curve(sched("constant"), {{0, 1e-3}, {5, 1e-3}, {1000, 1e-3}});
  expect_curve(sched("constant_with_warmup"), {{0, 1e-4}, {5, 5.5e-4}, {10, 1e-3}, {1000, 1e-3}});
}

TEST(LrSchedule, WarmupMinLrAndDefaultTMax) {
  auto c = sched("cosine_with_warmup");
  c.warmup_min_lr = 0.0;
  c.t_max.reset();
  EXPECT_NEAR(learning_rate(c, 1e-3, 5, 110), 5e-4, 1e-15);
  EXPECT_NEAR(learning_rate(c, 1e-3, 60, 110), 5.5e-4, 1e-15);  // t_max from the run length
}
