#pragma once
// Intervals over seeds for the report: Student's t, as a paper states a mean over a handful of
// runs. The quantile is computed here (regularized incomplete beta, bisection), checked against
// scipy.stats.t in tests/runs/stats_test.cpp.
#include <optional>
#include <vector>

namespace siamese::runs {

// P(T <= t) for Student's t with `df` degrees of freedom (df > 0).
double student_t_cdf(double t, double df);
// The t with P(T <= t) = p, 0 < p < 1.
double student_t_quantile(double p, double df);

// A mean with its two-sided t interval at `level`: mean ± t_{(1+level)/2, n-1} * sd / sqrt(n).
struct MeanInterval {
  int n = 0;
  double mean = 0, sd = 0;
  std::optional<double> low, high;  // none below 2 values
};
MeanInterval mean_interval(const std::vector<double>& values, double level = 0.95);

}  // namespace siamese::runs
