// TensorBoard event files: the CRC-32C that TFRecord framing uses, and a run's events read
// back by the tensorboard package's own reader (EventAccumulator), value for value against
// metrics.jsonl (the z-loss among them).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "siamese/train/tensorboard.h"
#include "support/process.h"
#include "support/temp_dir.h"

using siamese::testing::read_all;
using siamese::testing::TempDir;

namespace siamese::train {
namespace {
TEST(TensorBoard, Crc32cMatchesTheCastagnoliCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);            // the standard check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4
}

// metrics.jsonl writes NaN and inf as null; TensorBoard gets no scalar for them either.
TEST(TensorBoard, NonFiniteValuesAreNotWritten) {
  TempDir dir;
  std::string path;
  {
    TensorBoardWriter writer(dir.file("tb"));
    writer.write(metrics_row(3, "nonfinite", {{"loss", std::nan("")}, {"grad_norm", INFINITY}, {"lr", 0.5}}));
    writer.write(metrics_row(4, "", {{"layer_grad_norms", {1.0, std::nan("")}}}));
    path = writer.path().string();
  }
  const std::string bytes = read_all(path);
  EXPECT_NE(bytes.find("nonfinite/lr"), std::string::npos);
  EXPECT_NE(bytes.find("train/layer_grad_norms/0"), std::string::npos);
  EXPECT_EQ(bytes.find("nonfinite/loss"), std::string::npos);
  EXPECT_EQ(bytes.find("nonfinite/grad_norm"), std::string::npos);
  EXPECT_EQ(bytes.find("train/layer_grad_norms/1"), std::string::npos);
}

TEST(TensorBoard, TensorBoardReadsTheRunsEveryMetric) {
  TempDir dir;
  const std::string log = dir.file("log");
  const std::string train = std::string("train ") + SIAMESE_SOURCE_DIR +
                            "/configs/tiny/quickstart.yaml --model.n_layers=2 "
                            "--max_duration=4 --eval_interval=2 --eval_subset_num_batches=1 "
                            "--save_interval=100 --softmax_auxiliary_loss=true --save_folder=" +
                            dir.file("run");
  ASSERT_EQ(testing::run_cli(train, log), 0) << read_all(log);
  const std::string read =
      std::string(SIAMESE_SOURCE_DIR) + "/tests/train/tensorboard_read.py " + dir.file("run");
  EXPECT_EQ(testing::run_python(read, log).exit_code, 0) << read_all(log);
}

}  // namespace
}  // namespace siamese::train
