#pragma once
// Rounding bounds for tests that compare two computations of the same quantity, derived from
// the arithmetic rather than tuned to one machine. A sum of n terms, in any order and any
// blocking, is within gamma_n * sum |terms| of the exact sum (Higham, "Accuracy and Stability
// of Numerical Algorithms", 2nd ed., section 4.2), gamma_n = n u / (1 - n u) with u the unit
// roundoff (half the machine epsilon). Two such computations differ by at most twice that.
// A bound scaled by max |result| instead is wrong where the result is small through
// cancellation: a scalar's gradient summed over every token is a few units of roundoff of
// its terms, not of itself.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/torch.h>

#include <limits>

namespace siamese::testing {

inline double unit_roundoff(torch::ScalarType t) {
  if (t == torch::kFloat64) return std::numeric_limits<double>::epsilon() / 2;
  if (t == torch::kBFloat16) return double(std::numeric_limits<c10::BFloat16>::epsilon()) / 2;
  if (t == torch::kFloat16) return double(std::numeric_limits<c10::Half>::epsilon()) / 2;
  return double(std::numeric_limits<float>::epsilon()) / 2;
}

// gamma_n of `t`'s arithmetic.
inline double gamma(int64_t n, torch::ScalarType t) {
  const double nu = double(n) * unit_roundoff(t);
  return nu / (1 - nu);
}

// The largest |a - b| / (2 gamma_n abs_sum) over the elements, where abs_sum holds each
// element's sum of absolute terms: at most 1 when a and b are the same sum of n terms
// computed in two orders. Elements whose terms are all zero must agree exactly.
inline double sum_order_ratio(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& abs_sum,
                              int64_t n) {
  const auto bound = 2 * gamma(n, b.scalar_type()) * abs_sum.to(torch::kFloat64);
  const auto diff = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs();
  const auto floor = torch::full_like(bound, std::numeric_limits<double>::min());
  return (diff / torch::maximum(bound, floor)).max().item<double>();
}

}  // namespace siamese::testing
