#pragma once
// Tests that check a computation against a Python reference (transformers, torch in the
// venv): the C++ side writes each case's inputs into a folder, a script of tests/ writes
// ref_<name>.npy files back, and the results are compared by name.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "siamese/common/npy.h"
#include "support/files.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace siamese::testing {

// Runs the venv's python on SIAMESE_SOURCE_DIR/`script` with `args`; the exit status, the
// output in `log`.
inline int run_python_reference(const std::string& script, const std::string& args, const std::string& log) {
  return run_python(std::string(SIAMESE_SOURCE_DIR) + "/" + script + " " + args, log).exit_code;
}

// run_python_reference's status as an assertion whose failure carries the script's output.
inline ::testing::AssertionResult reference_ran(const std::string& script, const std::string& args,
                                                const std::string& log) {
  if (run_python_reference(script, args, log) == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << read_all(log);
}

// Creates `dir`/case<k> for one case's files and adds it to `folders`, the script's arguments.
inline std::string new_case_folder(const TempDir& dir, size_t k, std::string& folders) {
  const std::string folder = dir.file("case" + std::to_string(k));
  std::filesystem::create_directories(folder);
  folders += " " + folder;
  return folder;
}

using NamedResults = std::vector<std::pair<std::string, torch::Tensor>>;

// Expects each result within `tolerance` of folder/ref_<name>.npy, relative to the larger of
// 1 and the reference's largest magnitude; returns the largest such relative error.
inline double expect_matches_reference(const std::string& folder, const NamedResults& ours,
                                       double tolerance) {
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

}  // namespace siamese::testing
