// Expected values are OLMo's formulas (olmo/optim.py) evaluated by hand for peak 1e-3,
// t_warmup 10, t_max 110, alpha_f 0.1 (eta_min 1e-4, default warmup_min_lr 1e-4).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <fstream>
#include <map>
#include <regex>

#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/train/lr_schedule.h"
#include "support/process.h"
#include "support/temp_dir.h"

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

// WSD over t_max 110 with t_warmup 10 and t_decay 20: the peak from 10 to 90, then each shape
// from the peak to alpha_f of it at 110 (progress 1/4 at 95, 1/2 at 100).
TEST(LrSchedule, WsdHoldsThePeakThenDecaysInEachShape) {
  auto c = sched("wsd");
  c.t_decay = 20;
  expect_curve(c,
               {{5, 5.5e-4}, {10, 1e-3}, {50, 1e-3}, {90, 1e-3}, {95, 7.75e-4}, {100, 5.5e-4}, {110, 1e-4}});
  c.decay_shape = config::DecayShape::Cosine;
  expect_curve(c, {{90, 1e-3}, {95, 1e-4 + 9e-4 * (1 + std::cos(M_PI / 4)) / 2}, {100, 5.5e-4}, {110, 1e-4}});
  c.decay_shape = config::DecayShape::OneMinusSqrt;
  expect_curve(c, {{90, 1e-3}, {95, 5.5e-4}, {100, 1e-4 + 9e-4 * (1 - std::sqrt(0.5))}, {110, 1e-4}});
  // decay_fraction rounds half to even, as Python's round: 0.125 of 100 is 12, 0.135 of 100 14.
  c = sched("wsd");
  c.decay_fraction = 0.125;
  EXPECT_EQ(siamese::train::wsd_decay_length(c, 100), 12);
  c.decay_fraction = 0.135;
  EXPECT_EQ(siamese::train::wsd_decay_length(c, 100), 14);
  c.decay_fraction.reset();
  EXPECT_EQ(siamese::train::wsd_decay_length(c, 100), 10);  // OLMo-core's default 0.1
}

// OLMo-core's WSD (ai2-olmo-core, olmo_core/optim/scheduler.py) at every step of three
// schedules: a decay given in steps, a fraction that rounds half to even, and minimum rates.
// Both evaluate the same few float64 operations, so they agree within a few ulps of the peak.
TEST(LrSchedule, WsdIsOlmoCoresAtEveryStep) {
  struct Case {
    double peak;
    int warmup, t_max;
    double warmup_min_lr, alpha_f;
    std::string decay;  // "decay=N" or "fraction=F"
  };
  const Case cases[] = {{1e-3, 10, 100, 0.0, 0.0, "fraction=0.125"},
                        {3e-4, 5, 57, 1e-5, 0.1, "decay=13"},
                        {6e-4, 20, 333, 6e-5, 0.05, "fraction=0.2"}};
  siamese::testing::TempDir dir;
  for (const Case& k : cases) {
    const std::string log = (dir.path() / "wsd.log").string();
    const auto args = fmt::format("{}/tests/train/olmo_core_wsd.py {} {} {} {} {} {}", SIAMESE_SOURCE_DIR,
                                  k.peak, k.warmup, k.t_max, k.warmup_min_lr, k.alpha_f * k.peak, k.decay);
    siamese::testing::Limits limits;
    limits.err = (dir.path() / "wsd.stderr").string();
    ASSERT_EQ(siamese::testing::run_python(args, log, limits).exit_code, 0)
        << siamese::testing::read_all(log);
    config::SchedulerConfig c = sched("wsd");
    c.t_warmup = k.warmup;
    c.t_max = k.t_max;
    c.warmup_min_lr = k.warmup_min_lr;
    c.alpha_f = k.alpha_f;
    const double value = std::stod(k.decay.substr(k.decay.find('=') + 1));
    if (k.decay.rfind("decay=", 0) == 0)
      c.t_decay = value;
    else
      c.decay_fraction = value;
    std::ifstream in(log);
    const std::regex line(R"(^(\d+) (\S+)$)");
    int seen = 0;
    for (std::string text; std::getline(in, text);) {
      std::smatch m;
      if (!std::regex_match(text, m, line)) continue;
      const double t = std::stod(m[1]), want = std::stod(m[2]);
      EXPECT_NEAR(learning_rate(c, k.peak, t, 1e9), want, 8 * DBL_EPSILON * k.peak)
          << k.decay << " at t=" << t;
      ++seen;
    }
    EXPECT_EQ(seen, k.t_max + 1) << siamese::testing::read_all(log);
  }
}

// The decay keys mean something under wsd only, and one decay length at a time.
TEST(LrSchedule, WsdKeysElsewhereOrTwiceAreRefusedNamingTheKey) {
  const std::string base = std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/quickstart.yaml";
  auto refused = [&](const std::vector<std::string>& overrides, const std::string& key) {
    try {
      siamese::config::load_config(base, overrides);
      ADD_FAILURE() << key << " accepted";
    } catch (const siamese::Error& e) {
      EXPECT_NE((std::string(e.what()) + e.where()).find(key), std::string::npos) << e.what();
    }
  };
  refused({"--scheduler.t_decay=5"}, "scheduler.t_decay");
  refused({"--scheduler.decay_shape=1-sqrt"}, "scheduler.decay_shape");
  refused({"--scheduler.name=wsd", "--scheduler.t_decay=5", "--scheduler.decay_fraction=0.2"},
          "scheduler.t_decay");
  EXPECT_NO_THROW(
      siamese::config::load_config(base, {"--scheduler.name=wsd", "--scheduler.decay_shape=1-sqrt"}));
}

// README's shortcut `--set max_duration=20` under t_warmup 50 compared learning rates the runs
// never reached, without a word: a run that ends inside its warmup is named, with the share of
// the peak it reaches; one that gets past it, or a constant schedule, is not.
TEST(LrSchedule, ARunThatEndsInsideItsWarmupIsNamed) {
  auto c = sched("cosine_with_warmup");
  c.t_warmup = 50;
  const std::string why = siamese::train::short_of_peak(c, 1e-3, 20);
  EXPECT_NE(why.find("inside scheduler.t_warmup 50"), std::string::npos) << why;
  EXPECT_NE(why.find("46% of optimizer.learning_rate"), std::string::npos) << why;  // 1e-4 + 9e-4 * 20/50
  EXPECT_EQ(siamese::train::short_of_peak(c, 1e-3, 50), "");
  EXPECT_EQ(siamese::train::short_of_peak(sched("constant"), 1e-3, 5), "");
}

// A run's length in steps and in the scheduler's units: tokens round up to whole global
// batches as OLMo's do, epochs count whole global batches of the data.
TEST(RunLength, StepsTokensAndEpochsInEitherUnit) {
  config::TrainConfig c;
  c.global_train_batch_size = 4;
  c.model.max_sequence_length = 8;  // 32 tokens a step
  c.max_duration = "10";
  EXPECT_EQ(siamese::train::run_length(c, 0).steps, 10);
  EXPECT_EQ(siamese::train::run_length(c, 0).schedule_max, 10.0);
  c.max_duration = "33T";
  EXPECT_EQ(siamese::train::run_length(c, 0).steps, 2);
  c.scheduler.units = config::ScheduleUnits::Tokens;
  EXPECT_EQ(siamese::train::run_length(c, 0).schedule_max, 33.0);  // the tokens asked for, not 64
  EXPECT_TRUE(siamese::train::run_length(c, 0).token_units);
  c.max_duration = "3ep";
  EXPECT_EQ(siamese::train::run_length(c, 7).steps, 21);
  EXPECT_EQ(siamese::train::run_length(c, 7).schedule_max, 21.0 * 32);
}
