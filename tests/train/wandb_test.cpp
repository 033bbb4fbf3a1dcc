// Live W&B (train/wandb_stream.h) with the real wandb client in offline mode: the run it
// leaves holds every row of metrics.jsonl at its step with the run's config, a resumed run
// goes on in the same W&B run, and a streamer that dies never stops training.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "support/process.h"
#include "support/temp_dir.h"

using siamese::testing::Child;
using siamese::testing::read_all;
using siamese::testing::TempDir;

namespace siamese::train {
namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string train_args(const TempDir& dir, int steps) {
  return std::string("train ") + SIAMESE_SOURCE_DIR +
         "/configs/tiny/quickstart.yaml --model.n_layers=2 --max_duration=" + std::to_string(steps) +
         " --eval_interval=2 --eval_subset_num_batches=1 --save_interval=2 --save_folder=" + dir.file("run") +
         " --wandb.project=siamese-ci --wandb.tags=[ci,tiny]";
}

// Every row of both legs, the eval rows and per-layer gradient norms among them, in the one
// offline run the first leg created (wandb_run_id), read back record by record.
TEST(Wandb, AnOfflineRunHoldsEveryRowAtItsStepWithTheConfigAcrossAResume) {
  TempDir dir;
  const std::string offline = "WANDB_MODE=offline HOME=" + dir.file("home") + " -u WANDB_API_KEY";
  const auto first = testing::run_siamese(train_args(dir, 4), dir.path(), offline);
  ASSERT_EQ(first.exit_code, 0) << first.output << first.err;
  EXPECT_NE(first.err.find("W&B: streaming metrics to project siamese-ci"), std::string::npos) << first.err;
  const std::string id = read_all(dir.file("run/wandb_run_id"));
  ASSERT_FALSE(id.empty());

  const auto second = testing::run_siamese(train_args(dir, 6), dir.path(), offline);
  ASSERT_EQ(second.exit_code, 0) << second.output << second.err;
  EXPECT_EQ(read_all(dir.file("run/wandb_run_id")), id);

  const std::string log = dir.file("read.log");
  const std::string read = std::string(SIAMESE_SOURCE_DIR) + "/tests/train/wandb_read.py " + dir.file("run") +
                           " siamese-ci 2 ci tiny";
  EXPECT_EQ(testing::run_python(read, log).exit_code, 0) << read_all(log);
}

// The trainer killed mid-run: the streamer's stdin ends with it, and it logs every row the
// trainer wrote before it finishes on its own.
TEST(Wandb, AKilledTrainerLeavesEveryRowItWroteInTheOfflineRun) {
  TempDir dir;
  testing::Limits limits;
  limits.env = {{"WANDB_MODE", "offline"}, {"HOME", dir.file("home")}, {"WANDB_API_KEY", std::nullopt}};
  Child trainer(testing::words(train_args(dir, 100000)), dir.file("train.log"), limits);
  const auto until = [](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (!done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return done();
  };
  // Past its first evaluation, so an event row is among those streamed.
  ASSERT_TRUE(until([&] {
    return read_all(dir.file("run/metrics.jsonl")).find("\"event\"") != std::string::npos;
  })) << read_all(dir.file("train.log"));
  trainer.kill(SIGKILL);
  EXPECT_EQ(trainer.wait().signal, SIGKILL);
  ASSERT_TRUE(until([&] {
    return read_all(dir.file("run/wandb_stream.log")).find("wandb_stream: logged") != std::string::npos;
  })) << read_all(dir.file("run/wandb_stream.log"));
  const std::string log = dir.file("read.log");
  const std::string read = std::string(SIAMESE_SOURCE_DIR) + "/tests/train/wandb_read.py " + dir.file("run") +
                           " siamese-ci 1 ci tiny";
  EXPECT_EQ(testing::run_python(read, log).exit_code, 0) << read_all(log);
}

// No API key and W&B online: wandb.init fails in the streamer, which the trainer names once.
TEST(Wandb, AStreamerThatDiesIsNamedOnceAndTheRunTrainsOn) {
  TempDir dir;
  const auto out = testing::run_siamese(train_args(dir, 4), dir.path(),
                                        "WANDB_MODE=online HOME=" + dir.file("home") + " -u WANDB_API_KEY");
  ASSERT_EQ(out.exit_code, 0) << out.output << out.err;
  EXPECT_EQ(count(out.err, "W&B: the streamer stopped (exit 1)"), 1u) << out.err;
  EXPECT_NE(read_all(dir.file("run/wandb_stream.log")).find("No API key"), std::string::npos);
  EXPECT_EQ(count(read_all(dir.file("run/metrics.jsonl")), "\"event\""), 2u);  // the two evaluations
}

// A python that cannot be started is a warning at start, and nothing else changes.
TEST(Wandb, APythonThatCannotStartIsAWarning) {
  TempDir dir;
  const auto out =
      testing::run_siamese(train_args(dir, 2), dir.path(), "SIAMESE_PYTHON=" + dir.file("nothing"));
  ASSERT_EQ(out.exit_code, 0) << out.output << out.err;
  EXPECT_NE(out.err.find("W&B: could not start " + dir.file("nothing")), std::string::npos) << out.err;
  EXPECT_EQ(count(out.err, "W&B:"), 1u) << out.err;
}

}  // namespace
}  // namespace siamese::train
