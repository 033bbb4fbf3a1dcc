// Faults of multi-rank runs: ranks given unequal data by the instance filter, damaged
// sharded checkpoints. Each rank is the real binary on a real Gloo process group.
#include <gtest/gtest.h>

#include <sstream>

#include "siamese_process.h"

using namespace siamese;
using namespace siamese::testing;

namespace {

// step -> the instances the filter left out of the step, all ranks (metrics.jsonl).
std::map<int64_t, int64_t> filtered_per_step(const fs::path& folder) {
  std::map<int64_t, int64_t> out;
  std::ifstream in(folder / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("filtered_instances"))
      out[j["step"].get<int64_t>()] = j["filtered_instances"].get<int64_t>();
  }
  return out;
}

// The tiny run without dropout (so that 2 ranks repeat 1 process), one sequence per
// micro-batch, with OLMo-2's instance filter at a count the arithmetic corpus often reaches.
TrainConfig filtered_run(const fs::path& folder) {
  TrainConfig c = tiny(folder);
  c.model.attention_dropout = c.model.residual_dropout = c.model.embedding_dropout = 0.0;
  c.device_train_microbatch_size = 1;
  c.data.instance_filter.repetition_max_count = 3;
  c.distributed.timeout_seconds = 15;  // a deadlock fails the test soon
  return c;
}

}  // namespace

// The filter leaves the ranks unequal shares (an odd number of instances left out of a step
// of 2 x 2), so one rank has fewer micro-batches. FULL_SHARD gathers every block in each
// forward: the ranks used to wait for each other until the timeout. Every rank now runs the
// longest share's count (the extra ones empty), and the losses are the one-process run's.
TEST(UnequalShares, FullShardTrainsAsOneProcessWhenTheFilterLeavesRanksUnequal) {
  const auto root = scratch("unequal_shares");
  const TrainConfig one = filtered_run(root / "one");
  const Outcome single = run_siamese(train_args(one), root / "one.log");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const auto filtered = filtered_per_step(one.save_folder);
  ASSERT_EQ(filtered.size(), 8u);
  int odd = 0;
  for (const auto& [step, n] : filtered) odd += n % 2;
  ASSERT_GT(odd, 0) << "no step leaves the ranks unequal";

  const TrainConfig two = filtered_run(root / "two");
  auto ranks = start_sharded(two, 2, (root / "two.log").string(),
                             {"--distributed_strategy=fsdp", "--fsdp.sharding_strategy=FULL_SHARD"});
  const Outcome sharded = wait_sharded(ranks);
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  const auto want = losses(one.save_folder), got = losses(two.save_folder);
  ASSERT_EQ(got.size(), 8u) << sharded.output;
  for (const auto& [step, loss] : got) EXPECT_NEAR(loss, want.at(step), 1e-5) << "step " << step;
  EXPECT_EQ(filtered_per_step(two.save_folder), filtered);
}

// manifest.json of the newest checkpoint of 2 FULL_SHARD ranks edited to say another number
// of optimizer shards than it lists: 0 used to crash the resume (SIGSEGV), 3 to stop it with a
// raw fopen error on optim_shard0of3.pt. The checkpoint is now refused naming the key, the run
// falls back to the one before (as for any damaged checkpoint), and an explicit load_path to
// it is refused with exit 2.
TEST(ShardManifest, AWrongShardCountFallsBackToThePreviousCheckpoint) {
  const auto root = scratch("shard_manifest");
  TrainConfig c = tiny_saving(root / "run");
  c.max_duration = "3";
  auto ranks = start_sharded(c, 2, (root / "first.log").string(),
                             {"--distributed_strategy=fsdp", "--fsdp.sharding_strategy=FULL_SHARD"});
  const Outcome first = wait_sharded(ranks);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const fs::path step3 = fs::path(c.save_folder) / "step3";
  const std::string pristine = read_all(step3 / "manifest.json");
  auto edit = [&](const fs::path& folder, const nlohmann::json& shards) {
    auto manifest = nlohmann::json::parse(pristine);
    manifest["optimizer_shards"] = shards;
    std::ofstream(folder / "step3" / "manifest.json", std::ios::trunc) << manifest.dump(2) << "\n";
  };
  for (const nlohmann::json& shards : {nlohmann::json(0), nlohmann::json(3), nlohmann::json(1),
                                       nlohmann::json(-1), nlohmann::json("2"), nlohmann::json(1LL << 40)}) {
    SCOPED_TRACE(shards.dump());
    edit(c.save_folder, shards);
    const auto problem = train::checkpoint_problem(step3);
    ASSERT_TRUE(problem.has_value());
    EXPECT_NE(problem->find("optimizer_shards " + shards.dump()), std::string::npos) << *problem;
    EXPECT_EQ(train::latest_checkpoint(c.save_folder), fs::path(c.save_folder) / "step2");
  }
  std::ofstream(step3 / "manifest.json", std::ios::trunc) << pristine;
  ASSERT_FALSE(train::checkpoint_problem(step3).has_value());

  for (int shards : {0, 3}) {
    SCOPED_TRACE(shards);
    const fs::path copy = root / ("resumed" + std::to_string(shards));
    fs::copy(c.save_folder, copy, fs::copy_options::recursive);
    edit(copy, shards);
    TrainConfig again = c;
    again.save_folder = copy.string();
    const Outcome explicit_load =
        run_siamese(train_args(again, {"--load_path", (copy / "step3").string(), "--max_duration", "4"}),
                    copy.string() + ".explicit.log");
    EXPECT_EQ(explicit_load.exit_code, 2) << explicit_load.output;
    EXPECT_NE(explicit_load.output.find("not an intact checkpoint: manifest.json says optimizer_shards"),
              std::string::npos)
        << explicit_load.output;

    const Outcome resumed = run_siamese(train_args(again), copy.string() + ".log");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(
        resumed.output.find("step3: skipped, not an intact checkpoint: manifest.json says optimizer_shards " +
                            std::to_string(shards)),
        std::string::npos)
        << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from " + (copy / "step2").string()), std::string::npos)
        << resumed.output;
    EXPECT_EQ(intact(copy), (std::vector<std::string>{"step1", "step2", "step3"}));
  }
}
