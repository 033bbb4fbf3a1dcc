// A branched WSD decay through the CLI: a stable run of the quickstart model, and from its
// step-4 checkpoint a decay of 3 steps as a run of its own (decay_from).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "siamese/config/load.h"
#include "siamese/train/lr_schedule.h"
#include "support/files.h"
#include "support/process.h"
#include "support/run_files.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace siamese;
using siamese::testing::fresh_dir;
using siamese::testing::read_all;

namespace {

const std::string kWsd =
    " --model.n_layers=2 --model.max_sequence_length=32 --global_train_batch_size=4 "
    "--device_train_microbatch_size=4 --eval_interval=1000 --optimizer.metrics_log_interval=1 "
    "--scheduler.name=wsd --scheduler.t_warmup=3 --save_interval=2 --save_num_checkpoints_to_keep=-1";

int train_wsd(const std::string& extra, const fs::path& log) {
  return siamese::testing::run_cli(
      std::string("train ") + SIAMESE_SOURCE_DIR + "/configs/tiny/quickstart.yaml" + kWsd + " " + extra,
      log.string());
}

}  // namespace

// The branch starts from the parent's step-4 checkpoint and trains steps 5-7 with the decay
// from the peak to alpha_f, while the parent stays at the peak; it lives in stable_decay4+3
// beside the parent, names the parent in run.json and config.yaml, and run again resumes from
// its own checkpoint. Branching from the warmup or without a wsd decay length is refused
// naming the key.
TEST(DecayBranch, ABranchDecaysFromTheStableRunsCheckpointInAFolderOfItsOwn) {
  const fs::path root = fresh_dir("decay_branch", "runs"), stable = root / "stable";
  ASSERT_EQ(train_wsd("--max_duration=12 --scheduler.t_decay=4 --save_folder=" + stable.string(),
                      root / "stable.log"),
            0)
      << read_all(root / "stable.log");
  const fs::path branch = root / "stable_decay4+3";
  const std::string from = " --decay_from=" + (stable / "step4").string() + " --scheduler.t_decay=3";
  ASSERT_EQ(train_wsd("--max_duration=12 --save_folder=" + stable.string() + from, root / "branch.log"), 0)
      << read_all(root / "branch.log");
  ASSERT_TRUE(fs::exists(branch / "step6")) << read_all(root / "branch.log");

  const auto lrs = siamese::testing::step_values(branch, "lr");
  ASSERT_EQ(lrs.size(), 3u) << read_all(root / "branch.log");
  const config::TrainConfig cfg = config::load_config((branch / "config.yaml").string(), {});
  EXPECT_EQ(cfg.max_duration, "7");
  EXPECT_EQ(cfg.decay_from, (stable / "step4").string());
  for (const auto& [step, lr] : lrs)
    EXPECT_DOUBLE_EQ(std::stod(lr),
                     train::learning_rate(cfg.scheduler, cfg.optimizer.learning_rate, double(step), 7))
        << "step " << step;
  EXPECT_LT(std::stod(lrs.at(7)), 0.2 * cfg.optimizer.learning_rate);
  // The parent stays at the peak over those steps.
  EXPECT_DOUBLE_EQ(std::stod(siamese::testing::step_values(stable, "lr").at(6)), cfg.optimizer.learning_rate);
  const auto run = nlohmann::json::parse(read_all(branch / "run.json"));
  EXPECT_EQ(run["decay_from"], (stable / "step4").string());

  // Run again: it resumes from its own step6, not from the parent.
  ASSERT_EQ(train_wsd("--max_duration=12 --save_folder=" + stable.string() + from, root / "again.log"), 0)
      << read_all(root / "again.log");
  EXPECT_NE(read_all(root / "again.log").find("resumed from " + branch.string() + "/step"), std::string::npos)
      << read_all(root / "again.log");

  EXPECT_EQ(train_wsd("--max_duration=12 --save_folder=" + stable.string() +
                          " --decay_from=" + (stable / "step2").string() + " --scheduler.t_decay=3",
                      root / "warmup.log"),
            2);
  EXPECT_NE(read_all(root / "warmup.log").find("not in the stable phase"), std::string::npos)
      << read_all(root / "warmup.log");
  EXPECT_EQ(train_wsd("--max_duration=12 --save_folder=" + stable.string() +
                          " --decay_from=" + (stable / "step4").string(),
                      root / "no_decay.log"),
            2);
  EXPECT_NE(read_all(root / "no_decay.log").find("scheduler.t_decay"), std::string::npos)
      << read_all(root / "no_decay.log");
}
