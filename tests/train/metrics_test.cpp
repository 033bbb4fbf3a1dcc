// The training log (train/metrics.h): rows are never dropped silently, and resuming trims
// the rows past the checkpoint without touching the rest.
#include <gtest/gtest.h>

#include <vector>

#include "siamese/common/error.h"
#include "siamese/train/metrics.h"
#include "support/file_size_limit.h"
#include "support/temp_dir.h"

using namespace siamese;
using siamese::testing::FileSizeLimit;
using siamese::testing::read_all;
using siamese::testing::TempDir;

namespace {

std::vector<int64_t> steps_in(const std::string& path) {
  std::vector<int64_t> steps;
  read_metrics_rows(path,
                    [&](const nlohmann::json& row, const std::string&) { steps.push_back(row["step"]); });
  return steps;
}

}  // namespace

TEST(MetricsLog, ResumingDropsRowsPastTheCheckpointOnly) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  {
    train::MetricsLog log(path, 0);
    for (int64_t step = 1; step <= 5; ++step) log.write(metrics_row(step));
  }
  train::MetricsLog resumed(path, 3);
  resumed.write(metrics_row(4, "resumed"));
  EXPECT_EQ(steps_in(path), (std::vector<int64_t>{1, 2, 3, 4}));
}

TEST(MetricsLog, AFullDiskIsAnErrorNamingTheLogAndKeepsEveryEarlierRow) {
  TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  train::MetricsLog log(path, 0);
  log.write(metrics_row(1));
  const std::string before = read_all(path);
  std::string message;
  {
    FileSizeLimit limit(before.size() + 8);
    try {
      log.write(metrics_row(2, "", {{"loss", 2.5}, {"note", std::string(200, 'x')}}));
    } catch (const Error& e) {
      message = e.what();
    }
  }
  EXPECT_NE(message.find(path), std::string::npos) << "the write failed silently: " << message;
  EXPECT_EQ(read_all(path).substr(0, before.size()), before);
}
