// Effective speedup: the power-law fit of the baseline's ladder, and the table built on it,
// against numbers computed by hand from the law the points were drawn from.
#include "siamese/runs/effective_speedup.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "siamese/common/error.h"

using namespace siamese::runs;

namespace {

// The law every synthetic run below lies on: L = 1.5 + 0.8 (C / 1e12)^-0.35.
constexpr double kE = 1.5, kA = 0.8, kAlpha = 0.35, kC0 = 1e12;
double law(double c) { return kE + kA * std::pow(c / kC0, -kAlpha); }
double law_compute(double loss) { return kC0 * std::pow((loss - kE) / kA, -1 / kAlpha); }

constexpr double kFlopsPerToken = 1e6;
constexpr int64_t kTokensPerStep = 1000;
constexpr int64_t kBaseSteps = 1000;  // the baseline's length: C = 1e12

// A run of `steps` steps at `tps` tokens/s whose final loss is `loss`.
RunSummary run(const std::string& model, const std::string& topology, int64_t steps, double loss, double tps,
               int64_t seed) {
  RunSummary r;
  r.run = model + "-s" + std::to_string(seed);
  r.model = model;
  r.topology = topology;
  r.learning_rate = 3e-3;
  r.seed = seed;
  r.steps = steps;
  r.tokens = steps * kTokensPerStep;
  r.final_loss = loss;
  r.flops_per_token = kFlopsPerToken;
  r.timed_steps = steps;
  r.train_seconds = double(r.tokens) / tps;
  r.settings = {{"model.residual", topology},
                {"max_duration", std::to_string(steps)},
                {"seed", std::to_string(seed)},
                {"optimizer.learning_rate", "0.003"}};
  return r;
}

double compute_of(int64_t steps) { return kFlopsPerToken * double(steps * kTokensPerStep); }

// The baseline "pre" at 1/4, 1/2, 1 and 2 times its length, two seeds each, on the law.
std::vector<RunSummary> ladder(double tps) {
  std::vector<RunSummary> runs;
  for (int64_t steps : {250, 500, 1000, 2000})
    for (int64_t seed : {1, 2})
      runs.push_back(run(steps == kBaseSteps ? "pre" : "pre+" + std::to_string(steps), "pre", steps,
                         law(compute_of(steps)), tps, seed));
  return runs;
}

const SpeedupRow& row_of(const SpeedupTable& t, const std::string& model) {
  for (const auto& r : t.rows)
    if (r.model == model) return r;
  throw std::runtime_error("no row " + model);
}

}  // namespace

TEST(PowerLawFit, FourBudgetsRecoverTheSaturatingLaw) {
  std::vector<double> c, l;
  for (double k : {0.125, 0.25, 0.5, 1.0, 2.0}) {
    c.push_back(k * kC0);
    l.push_back(law(k * kC0));
  }
  const PowerLaw f = fit_power_law(c, l, "test");
  EXPECT_TRUE(f.saturating);
  EXPECT_NEAR(f.e, kE, 1e-6);
  EXPECT_NEAR(f.alpha, kAlpha, 1e-6);
  EXPECT_NEAR(f.loss_at(0.3 * kC0), law(0.3 * kC0), 1e-7);
  EXPECT_NEAR(*f.compute_for(law(1.7 * kC0)) / kC0, 1.7, 1e-5);
  EXPECT_FALSE(f.compute_for(kE).has_value());  // the floor is never reached
  EXPECT_LT(f.rms, 1e-7);
}

// Three points fix three parameters exactly: the fit falls back to the pure law, which
// recovers a pure law's exponent.
TEST(PowerLawFit, TwoOrThreeBudgetsFitThePureLaw) {
  auto pure = [](double c) { return 3.0 * std::pow(c / 1e10, -0.1); };
  const PowerLaw f = fit_power_law({1e10, 2e10, 4e10}, {pure(1e10), pure(2e10), pure(4e10)}, "test");
  EXPECT_FALSE(f.saturating);
  EXPECT_EQ(f.e, 0.0);
  EXPECT_NEAR(f.alpha, 0.1, 1e-12);
  EXPECT_NEAR(f.loss_at(3e10), pure(3e10), 1e-12);
}

TEST(PowerLawFit, TooFewBudgetsOrALossThatRisesAreRefused) {
  try {
    fit_power_law({1e10}, {2.0}, "--baseline pre");
    FAIL();
  } catch (const siamese::Error& e) {
    EXPECT_EQ(e.where(), "--baseline pre");
    EXPECT_NE(e.fix().find("max_duration"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fit_power_law({1e10, 2e10}, {2.0, 2.5}, "x"), siamese::Error);
  EXPECT_THROW(fit_power_law({1e10, 2e10, 4e10, 8e10}, {2.0, 2.1, 2.2, 2.3}, "x"), siamese::Error);
}

TEST(EffectiveSpeedup, MatchesTheHandComputationAndFlagsWhatTheFitCannotSay) {
  const double base_tps = 1000;
  auto runs = ladder(base_tps);
  const double c = compute_of(kBaseSteps);
  // mhc: the loss the baseline reaches at 1.2x and 1.8x its compute, at 0.9x its tokens/s.
  runs.push_back(run("mhc", "mhc", kBaseSteps, law(1.2 * c), 0.9 * base_tps, 1));
  runs.push_back(run("mhc", "mhc", kBaseSteps, law(1.8 * c), 0.9 * base_tps, 2));
  // attnres: better than the 2x budget (extrapolated); lite: below the floor.
  runs.push_back(run("attnres", "attnres", kBaseSteps, law(3 * c), base_tps, 1));
  runs.push_back(run("lite", "mhc_lite", kBaseSteps, kE - 0.01, base_tps, 1));
  // post: worse than the smallest budget; hybrid: trained beside another run (--jobs 2).
  runs.push_back(run("post", "post", kBaseSteps, law(0.2 * c), base_tps, 1));
  runs.push_back(run("hybrid", "hybrid_pre", kBaseSteps, law(1.5 * c), 2 * base_tps, 1));
  runs.back().concurrent_runs = 2;
  // A third mhc seed stopped at half its length, and a ladder run still training: left out.
  runs.push_back(run("mhc", "mhc", kBaseSteps / 2, 9.0, 0.9 * base_tps, 3));
  runs.back().max_steps = kBaseSteps;
  runs.push_back(run("pre+2000", "pre", 1500, 9.0, base_tps, 3));
  runs.back().max_steps = 2000;

  const SpeedupTable t = effective_speedup(runs, {"pre", "train"});
  ASSERT_EQ(t.ladder.size(), 4u);
  EXPECT_EQ(t.ladder[0].runs, 2);
  EXPECT_EQ(t.ladder[3].runs, 2);  // the unfinished third seed of the 2x budget is not a point
  EXPECT_NEAR(t.fit.alpha, kAlpha, 1e-5);
  // The ladder's other budgets are points of the fit, not rows.
  ASSERT_EQ(t.rows.size(), 6u);
  EXPECT_EQ(t.rows[0].model, "pre");

  const SpeedupRow& pre = row_of(t, "pre");
  EXPECT_NEAR(*pre.multiplier, 1.0, 1e-5);
  EXPECT_DOUBLE_EQ(*pre.throughput_ratio, 1.0);
  EXPECT_NEAR(*pre.speedup, 1.0, 1e-5);

  const SpeedupRow& mhc = row_of(t, "mhc");
  const double mean_loss = (law(1.2 * c) + law(1.8 * c)) / 2;
  EXPECT_NEAR(mhc.loss, mean_loss, 1e-12);
  EXPECT_NEAR(*mhc.multiplier, law_compute(mean_loss) / c, 1e-4);
  EXPECT_NEAR(*mhc.throughput_ratio, 0.9, 1e-12);
  EXPECT_NEAR(*mhc.speedup, 0.9 * law_compute(mean_loss) / c, 1e-4);
  EXPECT_NEAR(*mhc.seed_low, 0.9 * 1.2, 1e-4);
  EXPECT_NEAR(*mhc.seed_high, 0.9 * 1.8, 1e-4);
  EXPECT_EQ(mhc.range, FitRange::Inside);
  EXPECT_EQ(mhc.runs, 3);
  EXPECT_EQ(mhc.unfinished, 1);

  const SpeedupRow& attnres = row_of(t, "attnres");
  EXPECT_EQ(attnres.range, FitRange::Above);
  EXPECT_NEAR(*attnres.speedup, 3.0, 1e-3);

  const SpeedupRow& lite = row_of(t, "lite");
  EXPECT_EQ(lite.range, FitRange::BelowAsymptote);
  EXPECT_FALSE(lite.multiplier.has_value());
  EXPECT_FALSE(lite.speedup.has_value());
  EXPECT_EQ(lite.seeds_below_asymptote, 1);

  EXPECT_EQ(row_of(t, "post").range, FitRange::Below);

  const SpeedupRow& hybrid = row_of(t, "hybrid");
  EXPECT_NEAR(*hybrid.multiplier, 1.5, 1e-4);
  EXPECT_FALSE(hybrid.throughput_ratio.has_value());
  EXPECT_FALSE(hybrid.speedup.has_value());
  EXPECT_NE(hybrid.throughput_note.find("2 at once"), std::string::npos) << hybrid.throughput_note;

  const std::string md = markdown_speedup(t);
  EXPECT_NE(md.find("extrapolated: 1.50x the largest budget"), std::string::npos) << md;
  EXPECT_NE(md.find("loss below the fit's floor"), std::string::npos) << md;
  EXPECT_NE(md.find("- hybrid: no tokens/s ratio (trained 2 at once"), std::string::npos) << md;
  EXPECT_NE(md.find("| mhc | 0.003 | 3 (1 unfinished, left out) |"), std::string::npos) << md;
  const auto j = nlohmann::json::parse(speedup_json(t));
  EXPECT_EQ(j["rows"][1]["model"], "mhc");
  EXPECT_NEAR(j["rows"][1]["speedup"].get<double>(), *mhc.speedup, 1e-12);
  EXPECT_EQ(j["rows"][3]["fit_range"], "below_asymptote");
  EXPECT_TRUE(j["rows"][3]["speedup"].is_null());
}

// Step times from another thread count do not compare; nor does a baseline without any.
TEST(EffectiveSpeedup, ThroughputFromAnotherSetupIsNotCompared) {
  auto runs = ladder(1000);
  for (auto& r : runs) r.intra_op_threads = 1;
  runs.push_back(run("mhc", "mhc", kBaseSteps, law(1.2 * compute_of(kBaseSteps)), 900, 1));
  runs.back().intra_op_threads = 2;
  const SpeedupRow mhc = row_of(effective_speedup(runs, {"pre", "train"}), "mhc");
  EXPECT_NEAR(*mhc.multiplier, 1.2, 1e-4);
  EXPECT_FALSE(mhc.speedup.has_value());
  EXPECT_EQ(mhc.throughput_note, "2 threads, the baseline's 1");

  for (auto& r : runs) r.train_seconds = 0;
  const SpeedupRow untimed = row_of(effective_speedup(runs, {"pre", "train"}), "pre");
  EXPECT_FALSE(untimed.speedup.has_value());
  EXPECT_EQ(untimed.throughput_note, "the baseline has no comparable step times");
}

TEST(EffectiveSpeedup, ABaselineNotReportedOrOfSeveralLearningRatesIsRefused) {
  auto runs = ladder(1000);
  try {
    effective_speedup(runs, {"post", "train"});
    FAIL();
  } catch (const siamese::Error& e) {
    EXPECT_EQ(e.where(), "--baseline");
    EXPECT_NE(e.fix().find("pre, pre+2000, pre+250, pre+500"), std::string::npos) << e.what();
  }
  runs[4].learning_rate = 1e-2;  // a seed of "pre" itself
  EXPECT_THROW(effective_speedup(runs, {"pre", "train"}), siamese::Error);
  try {
    effective_speedup(ladder(1000), {"pre", "held-out"});
    FAIL();
  } catch (const siamese::Error& e) {
    EXPECT_EQ(e.where(), "--speedup-loss");
  }
}
