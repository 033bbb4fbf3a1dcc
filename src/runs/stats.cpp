#include "siamese/runs/stats.h"

#include <cmath>
#include <limits>

namespace siamese::runs {
namespace {

// The continued fraction of the regularized incomplete beta function (modified Lentz), valid
// for x < (a + 1) / (a + b + 2); the caller uses the symmetry I_x(a, b) = 1 - I_{1-x}(b, a)
// beyond it.
double beta_fraction(double x, double a, double b) {
  constexpr double tiny = 1e-300, eps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  d = 1 / (std::abs(d) < tiny ? tiny : d);
  double h = d;
  for (int m = 1; m <= 1000; ++m) {
    for (int odd = 0; odd < 2; ++odd) {
      const double num = odd ? -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
                             : m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
      d = 1 + num * d;
      d = 1 / (std::abs(d) < tiny ? tiny : d);
      c = 1 + num / c;
      if (std::abs(c) < tiny) c = tiny;
      h *= d * c;
      if (odd && std::abs(d * c - 1) < eps) return h;
    }
  }
  return h;
}

double incomplete_beta(double x, double a, double b) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(x, a, b) / a;
  return 1 - front * beta_fraction(1 - x, b, a) / b;
}

}  // namespace

double student_t_cdf(double t, double df) {
  const double tail = 0.5 * incomplete_beta(df / (df + t * t), df / 2, 0.5);
  return t >= 0 ? 1 - tail : tail;
}

double student_t_quantile(double p, double df) {
  if (p == 0.5) return 0;
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  double lo = 0, hi = 1;
  while (student_t_cdf(hi, df) < p) hi *= 2;
  // The CDF is monotone: bisection to the last bit of the double.
  for (int i = 0; i < 200 && hi - lo > 4 * std::numeric_limits<double>::epsilon() * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

MeanInterval mean_interval(const std::vector<double>& values, double level) {
  MeanInterval m;
  m.n = static_cast<int>(values.size());
  if (m.n == 0) return m;
  double sum = 0;
  for (double v : values) sum += v;
  m.mean = sum / m.n;
  if (m.n < 2) return m;
  double sq = 0;
  for (double v : values) sq += (v - m.mean) * (v - m.mean);
  m.sd = std::sqrt(sq / (m.n - 1));
  const double half = student_t_quantile(0.5 + level / 2, m.n - 1) * m.sd / std::sqrt(double(m.n));
  m.low = m.mean - half;
  m.high = m.mean + half;
  return m;
}

}  // namespace siamese::runs
