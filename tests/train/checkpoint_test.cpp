#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "siamese/common/error.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/save_folder.h"
#include "siamese/train/stateful.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

using siamese::testing::fresh_dir;

namespace fs = std::filesystem;
using namespace siamese;

namespace {

config::ModelConfig small() { return siamese::testing::tiny_model("pre", {16, 2, 1, 64, 64, 8}); }

}  // namespace

// Both optimizers: AdamW's moments and step counts, Muon's momentum buffers.
TEST(Checkpoint, RoundTripsModelOptimizerStateAndRng) {
  for (const char* optimizer : {"adamw", "muon"}) {
    SCOPED_TRACE(optimizer);
    auto dir = fresh_dir("ckpt_test", std::string("roundtrip_") + optimizer);
    torch::manual_seed(1);
    model::Transformer m(small());
    config::OptimizerConfig oc;
    oc.name = *config::enum_named<config::OptimizerName>(optimizer);
    auto opt = train::build_optimizer(oc, m->named_parameters());
    EXPECT_EQ(opt->muon() != nullptr, oc.name == config::OptimizerName::Muon);
    auto ids = torch::randint(0, 64, {2, 8});
    m->forward(ids).sum().backward();
    opt->update();
    train::save_checkpoint(dir, *m, *opt, {1, 16, 0}, "seed: 1\n");
    const auto expected_rand = torch::rand({4});

    torch::manual_seed(99);
    model::Transformer m2(small());
    auto opt2 = train::build_optimizer(oc, m2->named_parameters());
    auto state = train::load_checkpoint(dir / "step1", *m2, opt2.get());
    EXPECT_EQ(state.step, 1);
    EXPECT_EQ(state.tokens, 16);
    EXPECT_TRUE(torch::equal(torch::rand({4}), expected_rand));  // RNG restored
    auto p1 = m->named_parameters(), p2 = m2->named_parameters();
    for (const auto& kv : p1) EXPECT_TRUE(torch::equal(kv.value(), p2[kv.key()])) << kv.key();
    // The same next step from both optimizers gives the same weights.
    m->zero_grad();
    m2->zero_grad();
    m->forward(ids).sum().backward();
    m2->forward(ids).sum().backward();
    opt->update();
    opt2->update();
    for (const auto& kv : p1) EXPECT_TRUE(torch::equal(kv.value(), p2[kv.key()])) << kv.key();
  }
}

TEST(Checkpoint, KeepsNewestAndIgnoresIncompleteFolders) {
  auto dir = fresh_dir("ckpt_test", "keep");
  model::Transformer m(small());
  auto opt = train::build_optimizer(config::OptimizerConfig{}, m->named_parameters());
  std::set<int64_t> written;
  for (int64_t s : {2, 4, 6, 8}) {
    train::save_checkpoint(dir, *m, *opt, {s, s * 16, 0}, "");
    written.insert(s);
    train::prune_checkpoints(dir, 2, 0, written);
  }
  EXPECT_FALSE(fs::exists(dir / "step2"));
  EXPECT_FALSE(fs::exists(dir / "step4"));
  EXPECT_TRUE(fs::exists(dir / "step6"));
  // A crash mid-write leaves a temporary folder; a step folder without a manifest is not a
  // checkpoint either.
  fs::create_directories(dir / ".step10.tmp-123");
  fs::create_directories(dir / "step12");
  EXPECT_EQ(train::latest_checkpoint(dir)->filename(), "step8");
  EXPECT_THROW(train::load_checkpoint(dir / "step12", *m, opt.get()), Error);
  // A checkpoint of another shape fails with a siamese::Error, not a crash.
  auto other = small();
  other.d_model = 32;
  model::Transformer m3(other);
  EXPECT_THROW(train::load_checkpoint(dir / "step8", *m3, nullptr), Error);
}

namespace {

// A component with checkpointed state of its own, as an EMA or a data mixture would be.
struct Counter : train::Stateful {
  std::string name;
  int64_t count = 0;
  explicit Counter(std::string n) : name(std::move(n)) {}
  train::StateDict state_dict() const override { return {{name, torch::tensor(count, torch::kInt64)}}; }
  void load_state_dict(const train::StateDict& state) override {
    if (const auto t = train::state_entry(state, name); t.defined()) count = t.item<int64_t>();
  }
};

}  // namespace

// State registers itself: a tracked component's entries are saved and restored (and listed in
// train_state.json) without touching TrainState; a checkpoint from before the component
// existed leaves it as it is; two components naming one entry are refused.
TEST(Checkpoint, TrackedComponentsSaveAndRestoreTheirOwnState) {
  auto dir = fresh_dir("ckpt_test", "tracked");
  torch::manual_seed(1);
  model::Transformer m(small());
  auto opt = train::build_optimizer({}, m->named_parameters());
  Counter mixture("mixture_position");
  mixture.count = 41;
  train::save_checkpoint(dir, *m, *opt, {3, 48, 0}, "", {&mixture});
  train::save_checkpoint(dir, *m, *opt, {2, 32, 0}, "");  // before the component existed
  EXPECT_NE(siamese::testing::read_all((dir / "step3" / "train_state.json").string())
                .find("\"mixture_position\":41"),
            std::string::npos);

  Counter restored("mixture_position");
  EXPECT_EQ(train::load_checkpoint(dir / "step3", *m, nullptr, nullptr, nullptr, {&restored}).step, 3);
  EXPECT_EQ(restored.count, 41);
  Counter fresh("mixture_position");
  fresh.count = 7;
  train::load_checkpoint(dir / "step2", *m, nullptr, nullptr, nullptr, {&fresh});
  EXPECT_EQ(fresh.count, 7);

  Counter clash("step");
  EXPECT_THROW(train::save_checkpoint(dir, *m, *opt, {4, 64, 0}, "", {&clash}), c10::Error);
  EXPECT_FALSE(fs::exists(dir / "step4"));
}
