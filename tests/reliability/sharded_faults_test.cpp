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
