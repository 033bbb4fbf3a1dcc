#pragma once
// Tests that compare our tensors with a Python reference's: the reference script writes
// FOLDER/ref_<name>.npy for each named result, and refusals name their key and fix.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/common/npy.h"
#include "support/cli.h"
#include "support/files.h"

namespace siamese::testing {

using NamedResults = std::vector<std::pair<std::string, torch::Tensor>>;

// Runs the Python reference tests/<script> with the project's Python on `folders` (each
// preceded by a space), its output in `log`; a failure carries that output.
inline ::testing::AssertionResult reference_ran(const std::string& script, const std::string& folders,
                                                const std::string& log) {
  if (sh(std::string(SIAMESE_PYTHON) + " " + SIAMESE_SOURCE_DIR + "/tests/" + script + folders, log) == 0)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << read_all(log);
}

// Expects each of `ours` within `tolerance` of FOLDER/ref_<name>.npy, relative to the
// reference's largest entry (at least 1); returns the largest error so measured.
inline double expect_near_reference(const std::string& folder, const NamedResults& ours, double tolerance) {
  double worst = 0.0;
  for (const auto& [name, value] : ours) {
    SCOPED_TRACE(name);
    const auto want = read_npy(folder + "/ref_" + name + ".npy");
    EXPECT_EQ(want.sizes(), value.sizes());
    if (want.sizes() != value.sizes()) continue;
    const double scale = std::max(1.0, want.abs().max().item<double>());
    const double err =
        (value.detach().to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
    EXPECT_LT(err, tolerance * scale);
    worst = std::max(worst, err / scale);
  }
  return worst;
}

// Expects `build` to throw a siamese::Error whose where() is `key` and whose fix mentions `fix_part`.
inline void expect_refused(const std::function<void()>& build, const std::string& key,
                           const std::string& fix_part) {
  try {
    build();
    ADD_FAILURE() << "accepted; expected a refusal naming " << key;
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), key);
    EXPECT_NE(e.fix().find(fix_part), std::string::npos) << e.what();
  }
}

}  // namespace siamese::testing
