// check_memory_fits: what a run holds per rank at its peak, under its strategy, times the ranks
// that share one memory, against that memory: a GPU's of 80 GiB (NCCL's buffers), and through
// check_model_fits this machine's (Gloo's). Sizes are chosen from the memory, so the test
// checks the rule, not one machine's numbers; tests/dist/memory_peak_test.cpp checks the
// estimate against real runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <string>

#include "siamese/common/error.h"
#include "siamese/model/accounting.h"
#include "siamese/train/memory_plan.h"
#include "siamese/train/runtime.h"

using namespace siamese;

namespace {

double machine_bytes() { return double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE)); }

// A config whose weights, gradients and AdamW state take about `fraction` of this machine's
// memory, in about 100 layers and a small vocabulary, so that what a sharded rank holds
// whole (the embeddings, three blocks, the gradients in flight) is a small part of it on any
// machine.
config::TrainConfig taking(double fraction, double memory = machine_bytes()) {
  config::TrainConfig c;
  const double target = fraction * memory;
  c.model.n_heads = 8;
  c.model.d_model =
      std::max<int64_t>(64, 64 * std::llround(std::sqrt(target / (16.0 * 12.0 * 100.0)) / 64.0));
  c.model.vocab_size = c.model.embedding_size = 1024;
  c.model.n_layers = 1;
  const double one = model::training_state_bytes(c.model);
  c.model.n_layers = 2;
  const double per_layer = model::training_state_bytes(c.model) - one;
  c.model.n_layers = std::max<int64_t>(1, std::llround((target - (one - per_layer)) / per_layer));
  c.global_train_batch_size = 8;
  c.device_train_microbatch_size = 1;
  return c;
}

const double kGpu = 80.0 * double(1 << 30);

// Whether `world` ranks of `c`, `sharing` of them on one GPU of kGpu, pass the check.
bool fits_gpu(const config::TrainConfig& c, int world, int sharing) {
  try {
    train::check_memory_fits(c.model, train::rank_memory(c, world, sharing, false), world, sharing, kGpu,
                             "cuda:0");
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool fits(const config::TrainConfig& c, int world, int local) {
  try {
    train::check_model_fits(c, torch::kCPU, world, local);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

// 60% of the memory fits one process, and one rank a GPU; two replicas on one GPU need 150%
// (ddp keeps the gradients twice) and are refused; FULL_SHARD over the same two ranks holds
// about half each, and fits. On this machine's memory the same holds for ddp, and a refusal
// names the strategy, the ranks that share the memory and the key (8 CPU ranks of a 1B model
// used to be killed for memory after 95 s without a word).
TEST(MemoryFit, RanksSharingAMemoryCountTogetherAndShardsCountTheirShare) {
  config::TrainConfig c = taking(0.6, kGpu);
  EXPECT_TRUE(fits_gpu(c, 1, 1));
  EXPECT_TRUE(fits_gpu(c, 2, 1));
  EXPECT_FALSE(fits_gpu(c, 2, 2));
  c.distributed_strategy = config::DistributedStrategy::Fsdp;
  c.fsdp.sharding_strategy = config::ShardingStrategy::FullShard;
  EXPECT_TRUE(fits_gpu(c, 2, 2));
  EXPECT_TRUE(fits_gpu(c, 1, 1));  // one process has no shards, whatever fsdp.* says
  c = taking(1.3, kGpu);
  EXPECT_FALSE(fits_gpu(c, 1, 1));
  c.distributed_strategy = config::DistributedStrategy::Fsdp;
  c.fsdp.sharding_strategy = config::ShardingStrategy::FullShard;
  EXPECT_TRUE(fits_gpu(c, 4, 1));  // a quarter of it on each of 4 GPUs

  // SHARD_GRAD_OP keeps whole parameters, a master shard and, between micro-batches, whole
  // gradients: 16 bytes a parameter at 2 ranks, where the old estimate said 8 and let two
  // ranks on one memory start and die in the allocator.
  c = taking(0.55, kGpu);
  c.distributed_strategy = config::DistributedStrategy::Fsdp;
  c.fsdp.sharding_strategy = config::ShardingStrategy::ShardGradOp;
  EXPECT_TRUE(fits_gpu(c, 2, 1));
  EXPECT_FALSE(fits_gpu(c, 2, 2));

  c = taking(0.6);
  EXPECT_TRUE(fits(c, 1, 1));
  EXPECT_TRUE(fits(c, 2, 1));
  EXPECT_FALSE(fits(c, 2, 2));
  c = taking(0.6);
  try {
    train::check_model_fits(c, torch::kCPU, 2, 2);
    ADD_FAILURE() << "two replicas of 60% of the memory on one node were accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("GiB a rank"), std::string::npos) << what;
    EXPECT_NE(what.find("2 ranks share the memory"), std::string::npos) << what;
    EXPECT_NE(what.find("model.mlp_ratio"), std::string::npos) << what;
  }
}

// device: auto without a GPU took the CPU silently for OLMo-1B's 1.18B parameters. A model
// of kCpuFallbackParameters or more is refused there naming the key; device: cpu asks for it.
TEST(MemoryFit, AutoDeviceDoesNotFallBackToTheCpuForALargeModel) {
  config::TrainConfig c;
  c.model.d_model = 2048;
  c.model.n_heads = 16;
  c.model.n_layers = 16;
  ASSERT_GE(model::training_state_bytes(c.model) / 16.0, train::kCpuFallbackParameters);
  c.device = "auto";
  try {
    train::check_device_choice(c.device, c.model, torch::kCPU);
    ADD_FAILURE() << "a large model fell back to the CPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device: cpu"), std::string::npos) << e.what();
  }
  c.device = "cpu";
  EXPECT_NO_THROW(train::check_device_choice(c.device, c.model, torch::kCPU));
  c.device = "auto";
  c.model.n_layers = 1;
  c.model.d_model = 256;
  c.model.n_heads = 4;
  EXPECT_NO_THROW(train::check_device_choice(c.device, c.model, torch::kCPU));
}
