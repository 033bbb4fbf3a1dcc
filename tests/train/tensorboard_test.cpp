// TensorBoard event files: the CRC-32C that TFRecord framing uses, and a run's events read
// back by the tensorboard package's own reader (EventAccumulator), value for value against
// metrics.jsonl.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../tokenizer/temp_dir.h"
#include "siamese/train/tensorboard.h"

namespace siamese::train {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(TensorBoard, Crc32cMatchesTheCastagnoliCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(TensorBoard, TensorBoardReadsTheRunsEveryMetric) {
  TempDir dir;
  const std::string log = dir.file("log");
  const std::string train = std::string("OMP_NUM_THREADS=1 ") + SIAMESE_BINARY + " train " +
                            SIAMESE_SOURCE_DIR + "/configs/tiny/quickstart.yaml --model.n_layers=2 " +
                            "--max_duration=4 --eval_interval=2 --eval_subset_num_batches=1 " +
                            "--save_interval=100 --save_folder=" + dir.file("run") + " > " + log + " 2>&1";
  ASSERT_EQ(std::system(train.c_str()), 0) << read_all(log);
  const std::string read = std::string(SIAMESE_PYTHON) + " " + SIAMESE_SOURCE_DIR +
                           "/tests/train/tensorboard_read.py " + dir.file("run") + " > " + log + " 2>&1";
  EXPECT_EQ(std::system(read.c_str()), 0) << read_all(log);
}

}  // namespace
}  // namespace siamese::train
