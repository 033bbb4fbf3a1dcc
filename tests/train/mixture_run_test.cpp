// A weighted mixture through `siamese train` (data/source_mixture.h): a run stopped and
// resumed equals an uninterrupted one bit for bit with the same mixture rows, and a source
// that runs out is refused before anything is written. (The counts themselves are checked
// against OLMo-core in tests/data/source_mixture_test.cpp.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;

namespace siamese::train {
namespace {

// A raw uint16 token file of `n` tokens.
std::string write_tokens(const fs::path& path, int64_t n, uint16_t salt) {
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = uint16_t((i * 2654435761u + salt * 977u) % 250);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  return path.string();
}

std::string mixture_arg(const testing::TempDir& dir, double code_repetition) {
  const auto f = [&](const std::string& name, int64_t instances, uint16_t salt) {
    return write_tokens(dir.path() / name, 64 * instances + 5, salt);
  };
  return fmt::format(
      "'--data.source_mixture=[{{source_name: web, target_ratio: 0.6, paths: [{}, {}]}}, "
      "{{source_name: code, target_ratio: 0.3, paths: [{}], max_repetition_ratio: {}}}, "
      "{{source_name: math, target_ratio: 0.1, paths: [{}]}}]'",
      f("web0.npy", 150, 1), f("web1.npy", 90, 2), f("code.npy", 40, 3), code_repetition,
      f("math.npy", 60, 4));
}

std::string train_args(const testing::TempDir& dir, const std::string& run, const std::string& mixture) {
  return std::string("train ") + SIAMESE_SOURCE_DIR +
         "/configs/tiny/quickstart.yaml --model.n_layers=2 --data.synthetic= --global_train_batch_size=16 "
         "--device_train_microbatch_size=16 --max_duration=12 --console_log_interval=3 --save_interval=6 "
         "--save_num_checkpoints_to_keep=-1 --save_folder=" +
         dir.file(run) + " " + mixture;
}

std::vector<nlohmann::json> rows(const std::string& path, const std::string& event) {
  std::vector<nlohmann::json> out;
  std::istringstream in(testing::read_all(path));
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line);
    if (row.value("event", std::string()) == event) out.push_back(std::move(row));
  }
  return out;
}

// 12 steps of 16 instances straight, and the same stopped at step 6 and resumed: the same
// losses bit for bit, the same mixture rows; run.json holds the plan.
TEST(MixtureRun, TheTrainerResumesAMixtureBitForBitAndLogsItsShares) {
  testing::TempDir dir;
  const std::string mixture = mixture_arg(dir, 2.0);
  const auto whole = testing::run_siamese(train_args(dir, "whole", mixture), dir.path());
  ASSERT_EQ(whole.exit_code, 0) << whole.output << whole.err;
  EXPECT_NE(whole.err.find("mixture: code (target_ratio 0.3) gives 58 instances"), std::string::npos)
      << whole.err;
  const auto first = testing::run_siamese(train_args(dir, "split", mixture) + " --stop-at=6", dir.path());
  ASSERT_EQ(first.exit_code, 0) << first.output << first.err;
  const auto second = testing::run_siamese(train_args(dir, "split", mixture), dir.path());
  ASSERT_EQ(second.exit_code, 0) << second.output << second.err;

  const auto steps = [&](const std::string& run) { return rows(dir.file(run + "/metrics.jsonl"), ""); };
  const auto a = steps("whole"), b = steps("split");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << "step " << i + 1;
  const auto shares = rows(dir.file("whole/metrics.jsonl"), "mixture");
  ASSERT_EQ(shares.size(), 4u);  // steps 3, 6, 9, 12
  EXPECT_EQ(rows(dir.file("split/metrics.jsonl"), "mixture"), shares);
  const auto& last = shares.back();
  EXPECT_EQ(last["step"], 12);
  int64_t tokens = 0;
  for (const char* s : {"web", "code", "math"}) tokens += last[std::string("tokens.") + s].get<int64_t>();
  EXPECT_EQ(tokens, 12 * 16 * 64);
  EXPECT_NEAR(last["share.code"].get<double>(), 0.3, 1.0 / (12 * 16));

  const auto run = nlohmann::json::parse(testing::read_all(dir.file("whole/run.json")));
  ASSERT_EQ(run["mixture"].size(), 3u);
  EXPECT_EQ(run["mixture"][1]["source_name"], "code");
  EXPECT_EQ(run["mixture"][1]["instances"], 58);
}

// code (40 instances) cannot give 30% of 192 without repetition: exit 2 before any
// training, naming the source, and nothing written to the save folder.
TEST(MixtureRun, TheTrainerRefusesASourceThatRunsOut) {
  testing::TempDir dir;
  const auto out = testing::run_siamese(train_args(dir, "short", mixture_arg(dir, 1.0)), dir.path());
  EXPECT_EQ(out.exit_code, 2);
  EXPECT_NE(
      out.err.find("data.source_mixture[1] (code): source code must give 3686 tokens (target_ratio 0.3 of "
                   "the run's 12288) but can give 2565"),
      std::string::npos)
      << out.err;
  EXPECT_FALSE(fs::exists(dir.file("short/step0")));
  EXPECT_FALSE(fs::exists(dir.file("short/metrics.jsonl")));
}

}  // namespace
}  // namespace siamese::train
