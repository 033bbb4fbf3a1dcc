// The one metrics row type and its one reader.
#include <gtest/gtest.h>

#include <vector>

#include "siamese/common/error.h"
#include "siamese/common/json_line.h"
#include "siamese/common/metrics_row.h"
#include "support/temp_dir.h"

using siamese::testing::TempDir;

namespace siamese {
namespace {

TEST(MetricsRow, StepThenEventThenFieldsInOrder) {
  EXPECT_EQ(json_line(metrics_row(4, "eval", {{"label", "valid"}, {"loss", 2.5}})),
            "{\"step\": 4, \"event\": \"eval\", \"label\": \"valid\", \"loss\": 2.5}");
  EXPECT_EQ(json_line(metrics_row(5, "", {{"loss", 1.0}})), "{\"step\": 5, \"loss\": 1.0}");
}

TEST(MetricsRow, ReaderSkipsACutLastLineAndRefusesADamagedOne) {
  TempDir dir;
  const auto path = dir.write("metrics.jsonl",
                              "{\"step\": 1, \"loss\": 3.0}\n\n{\"step\": 2, \"event\": \"eval\"}\n"
                              "{\"step\": 3, \"lo");
  std::vector<int64_t> steps;
  std::vector<std::string> lines;
  read_metrics_rows(path, [&](const nlohmann::json& row, const std::string& line) {
    steps.push_back(row["step"].get<int64_t>());
    lines.push_back(line);
  });
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(lines.back(), "{\"step\": 2, \"event\": \"eval\"}");

  dir.write("broken.jsonl", "{\"step\": 1}\n{\"step\": 2, \"lo\n{\"step\": 3}\n");
  try {
    read_metrics_rows(dir.file("broken.jsonl"), [](const nlohmann::json&, const std::string&) {});
    FAIL() << "a damaged line in the middle was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.jsonl:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("repair or remove"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace siamese
