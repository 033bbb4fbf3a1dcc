// The checkpoint manager on its own, without a training run: one writer per folder, saves
// that prune, a resume that restores every tracked component, and the refusals.
#include "siamese/train/checkpoint_manager.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "siamese/common/error.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace fs = std::filesystem;
using namespace siamese;

namespace {

struct Position : train::Stateful {
  int64_t value = 0;
  train::StateDict state_dict() const override { return {{"position", torch::tensor(value, torch::kInt64)}}; }
  void load_state_dict(const train::StateDict& state) override {
    if (const auto t = train::state_entry(state, "position"); t.defined()) value = t.item<int64_t>();
  }
};

config::TrainConfig run_config(const fs::path& folder) {
  config::TrainConfig cfg;
  cfg.model = siamese::testing::tiny_model("pre", {16, 2, 1, 64, 64, 8});
  cfg.model.eos_token_id = 0;  // within the 64 ids: the resume reads the saved config back
  cfg.model.pad_token_id = 1;
  cfg.save_folder = folder.string();
  cfg.save_num_checkpoints_to_keep = 2;
  return cfg;
}

class CheckpointManagerTest : public ::testing::Test {
 protected:
  CheckpointManagerTest() : dir_(siamese::testing::fresh_dir("ckpt_manager", test_name())) {}
  static std::string test_name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }
  fs::path dir_;
  dist::ParallelPlan one_process_;
};

TEST_F(CheckpointManagerTest, SavesPruneAndALaterManagerResumesEveryTrackedComponent) {
  const auto cfg = run_config(dir_);
  torch::manual_seed(1);
  model::Transformer m(cfg.model);
  auto opt = train::build_optimizer(cfg.optimizer, m->named_parameters());
  {
    train::CheckpointManager checkpoints(cfg, one_process_);
    Position position;
    checkpoints.track(position);
    std::vector<train::SettingChange> changes;
    EXPECT_EQ(checkpoints.load(*m, *opt, 10, changes).step, 0) << "a fresh folder starts at step 0";
    for (int64_t step : {2, 4, 6}) {
      position.value = 100 + step;
      ASSERT_TRUE(checkpoints.save({step, step * 16, 0}, *m, *opt));
      EXPECT_EQ(checkpoints.last_saved(), step);
    }
    EXPECT_FALSE(fs::exists(dir_ / "step2")) << "save_num_checkpoints_to_keep 2";
    EXPECT_TRUE(fs::exists(dir_ / "step4"));
    // One writer per folder: a second manager is refused while this one holds the lock.
    EXPECT_THROW(train::CheckpointManager(cfg, one_process_), Error);
  }
  train::CheckpointManager again(cfg, one_process_);
  Position position;
  again.track(position);
  std::vector<train::SettingChange> changes;
  const auto state = again.load(*m, *opt, 10, changes);
  EXPECT_EQ(state.step, 6);
  EXPECT_EQ(state.tokens, 96);
  EXPECT_EQ(position.value, 106);
  EXPECT_TRUE(changes.empty());
}

TEST_F(CheckpointManagerTest, NonFiniteWeightsAreNotSavedAndForeignCheckpointsAreRefused) {
  auto cfg = run_config(dir_);
  torch::manual_seed(1);
  model::Transformer m(cfg.model);
  auto opt = train::build_optimizer(cfg.optimizer, m->named_parameters());
  {
    train::CheckpointManager checkpoints(cfg, one_process_);
    ASSERT_TRUE(checkpoints.save({1, 16, 0}, *m, *opt));
    torch::NoGradGuard no_grad;
    m->parameters()[0].fill_(std::numeric_limits<float>::quiet_NaN());
    EXPECT_FALSE(checkpoints.save({2, 32, 0}, *m, *opt));
    EXPECT_FALSE(fs::exists(dir_ / "step2"));
  }
  // Starting from another run's checkpoint over a folder that holds checkpoints of its own.
  const fs::path other = siamese::testing::fresh_dir("ckpt_manager", "other");
  {
    auto other_cfg = run_config(other);
    torch::manual_seed(2);
    model::Transformer fresh(other_cfg.model);
    auto fresh_opt = train::build_optimizer(other_cfg.optimizer, fresh->named_parameters());
    train::CheckpointManager(other_cfg, one_process_).save({3, 48, 0}, *fresh, *fresh_opt);
  }
  cfg.load_path = (other / "step3").string();
  model::Transformer m2(cfg.model);
  auto opt2 = train::build_optimizer(cfg.optimizer, m2->named_parameters());
  train::CheckpointManager checkpoints(cfg, one_process_);
  std::vector<train::SettingChange> changes;
  EXPECT_THROW(checkpoints.load(*m2, *opt2, 10, changes), Error);
  EXPECT_TRUE(fs::exists(dir_ / "step1")) << "the refusal keeps the folder's checkpoints";
}

// Background saves take their host copies before the first step (prepare_saves) and every save
// then writes from them: no save allocates a buffer, and what it writes is the weights at its
// step, not the copies taken at the start. Synchronous saves, and runs that save only at their
// end, take none.
TEST_F(CheckpointManagerTest, BackgroundSavesReuseTheCopiesTakenBeforeTheFirstStep) {
  auto cfg = run_config(dir_);
  cfg.save_async = true;
  cfg.save_interval = 2;
  torch::manual_seed(1);
  model::Transformer m(cfg.model);
  auto opt = train::build_optimizer(cfg.optimizer, m->named_parameters());
  opt->allocate_state();
  std::vector<train::SettingChange> changes;
  {
    train::CheckpointManager checkpoints(cfg, one_process_);
    const auto state = checkpoints.load(*m, *opt, 10, changes);
    checkpoints.prepare_saves(state, *m, *opt, 10);
    const int64_t made = checkpoints.staging().allocations();
    EXPECT_GT(made, int64_t(m->parameters().size()));  // the weights and the optimizer's moments
    EXPECT_GT(checkpoints.staging().bytes(), 0);
    {
      torch::NoGradGuard g;
      for (auto& p : m->parameters()) p.add_(1.0);
    }
    ASSERT_TRUE(checkpoints.save({2, 32, 0}, *m, *opt));
    ASSERT_TRUE(checkpoints.save({4, 64, 0}, *m, *opt));
    checkpoints.finish();
    EXPECT_EQ(checkpoints.staging().allocations(), made);
  }
  model::Transformer back(cfg.model);
  auto back_opt = train::build_optimizer(cfg.optimizer, back->named_parameters());
  train::CheckpointManager reader(cfg, one_process_);
  reader.load(*back, *back_opt, 10, changes);
  const auto want = m->named_parameters();
  for (const auto& p : back->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), want[p.key()])) << p.key();

  auto sync = run_config(dir_ / "sync");
  sync.save_interval = 2;
  train::CheckpointManager synchronous(sync, one_process_);
  synchronous.prepare_saves({}, *m, *opt, 10);
  EXPECT_EQ(synchronous.staging().allocations(), 0);
  auto at_end = run_config(dir_ / "end");
  at_end.save_async = true;
  at_end.save_interval = 10;
  train::CheckpointManager last_only(at_end, one_process_);
  last_only.prepare_saves({}, *m, *opt, 10);
  EXPECT_EQ(last_only.staging().allocations(), 0);
}

}  // namespace
