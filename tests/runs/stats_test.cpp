// The report's intervals against scipy.stats.t on the same numbers: the quantile over degrees
// of freedom 1-200 and both tails, the 95% interval of samples of 2-10 seeds, and the paired
// comparison's interval, which is the interval of the per-seed differences.
#include "siamese/runs/stats.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "siamese/runs/run_summary.h"
#include "support/files.h"
#include "support/python_reference.h"
#include "support/temp_dir.h"

namespace siamese::runs {
namespace {

// The bisection stops at a few ulps of t, and the incomplete beta's continued fraction at
// 1e-15 relative; t's own magnitude is below 64 here (df 1 at p = 0.995 is 63.66).
constexpr double kQuantileTolerance = 1e-10;

TEST(Stats, StudentTMatchesScipy) {
  siamese::testing::TempDir dir;
  nlohmann::json cases;
  std::vector<std::pair<double, double>> quantiles;
  for (double df : {1.0, 2.0, 3.0, 4.0, 5.0, 9.0, 29.0, 200.0})
    for (double p : {0.005, 0.025, 0.1, 0.5, 0.9, 0.975, 0.995}) quantiles.push_back({p, df});
  for (const auto& [p, df] : quantiles) cases["quantiles"].push_back({p, df});
  const std::vector<std::vector<double>> samples = {
      {3.1, 2.9},
      {2.5, 2.61, 2.47},
      {1.0, 2.0, 3.0, 4.0, 10.0},
      {4.2034, 4.1987, 4.2101, 4.1950, 4.2012, 4.2075, 4.1999, 4.2044, 4.1968, 4.2020}};
  for (const auto& s : samples) cases["samples"].push_back(s);
  std::ofstream(dir.file("cases.json")) << cases.dump();
  ASSERT_TRUE(siamese::testing::reference_ran("tests/runs/stats_reference.py",
                                              dir.file("cases.json") + " " + dir.file("scipy.json"),
                                              dir.file("log")));
  const auto want = nlohmann::json::parse(siamese::testing::read_all(dir.file("scipy.json")));
  for (size_t i = 0; i < quantiles.size(); ++i) {
    const auto [p, df] = quantiles[i];
    const double expected = want["quantiles"][i].get<double>();
    EXPECT_NEAR(student_t_quantile(p, df), expected, kQuantileTolerance * std::max(1.0, std::abs(expected)))
        << "p " << p << " df " << df;
    EXPECT_NEAR(student_t_cdf(expected, df), p, 1e-12) << "p " << p << " df " << df;
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    const MeanInterval m = mean_interval(samples[i]);
    ASSERT_TRUE(m.low && m.high);
    // The interval is mean ± t sd / sqrt(n): the quantile's error times a spread of order 1.
    EXPECT_NEAR(*m.low, want["intervals"][i][0].get<double>(), 1e-9) << "sample " << i;
    EXPECT_NEAR(*m.high, want["intervals"][i][1].get<double>(), 1e-9) << "sample " << i;
  }
  EXPECT_FALSE(mean_interval({2.0}).low) << "one value has no interval";
}

RunSummary run(const std::string& model, int64_t seed, double loss, bool diverged = false) {
  RunSummary r;
  r.run = model + "-" + std::to_string(seed);
  r.topology = r.model = model;
  r.learning_rate = 1e-3;
  r.seed = seed;
  r.final_loss = loss;
  r.diverged = diverged;
  return r;
}

// The paired table differences each seed's loss from the baseline's of the same seed; seeds
// the baseline lacks, and diverged runs, do not pair. Its interval is the differences' own.
TEST(Stats, PairedComparisonIsOverTheSeedsBothRan) {
  const std::vector<RunSummary> runs = {run("pre", 1, 3.00), run("pre", 2, 3.10),      run("pre", 3, 2.95),
                                        run("hc", 1, 2.90),  run("hc", 2, 3.05),       run("hc", 3, 2.80),
                                        run("hc", 4, 1.00),  run("mhc", 1, 2.00, true)};
  const std::string table = markdown_paired_table(runs, "pre");
  const MeanInterval d = mean_interval({2.90 - 3.00, 3.05 - 3.10, 2.80 - 2.95});
  const std::string cell = fmt::format("{:+.4f} [{:+.4f}, {:+.4f}]", d.mean, *d.low, *d.high);
  EXPECT_NE(table.find("| hc | 0.001 | 3 | " + cell + " | 1, 2, 3 |"), std::string::npos) << table;
  EXPECT_EQ(table.find("| mhc |"), std::string::npos) << "a diverged run pairs with nothing: " << table;
  EXPECT_EQ(markdown_paired_table(runs, "nothing"), "");
}

}  // namespace
}  // namespace siamese::runs
