// What train checks memory with (train::rank_memory, also `siamese inspect --world-size`)
// against what real runs hold: the peak resident memory (VmHWM, metrics.jsonl's
// peak_memory_mib) of one process, 2 ddp ranks, 2 SHARD_GRAD_OP ranks and 2 FULL_SHARD ranks
// of a 53M-parameter model, less the same launch's peak for a model of 30k parameters. And
// the launch the estimate was 20% short for: two SHARD_GRAD_OP ranks that cannot fit are
// refused before they allocate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "siamese/config/load.h"
#include "siamese/model/accounting.h"
#include "siamese/train/memory_plan.h"
#include "support/free_port.h"
#include "support/process.h"
#include "support/run_files.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace siamese;
using siamese::testing::fresh_dir;
using siamese::testing::read_all;

namespace {

// The state (16 bytes a parameter, 0.85 GB) is most of what the large model's ranks hold;
// small buckets keep the gradients in flight a small part of the rest.
const std::string kLarge =
    " --model.d_model=768 --model.n_heads=12 --model.n_layers=9 --distributed.bucket_mb=5";
const std::string kTiny =
    " --model.d_model=32 --model.n_heads=2 --model.n_layers=1 --distributed.bucket_mb=5";

std::string train_args(const fs::path& folder, const std::string& extra) {
  return std::string(" train ") + SIAMESE_SOURCE_DIR +
         "/configs/tiny/quickstart.yaml --model.max_sequence_length=32 --global_train_batch_size=4"
         " --max_duration=4 --eval_interval=1000 --save_interval=1000 --optimizer.metrics_log_interval=1"
         " --save_folder=" +
         folder.string() + " " + extra;
}

int launch(const fs::path& folder, const std::string& extra, int ranks) {
  siamese::testing::Limits limits;
  if (ranks > 1) limits = siamese::testing::under_torchrun(ranks, siamese::testing::free_port());
  limits.timeout_seconds = 900;
  return siamese::testing::run_siamese(siamese::testing::words(train_args(folder, extra)),
                                       folder.string() + ".log", limits)
      .exit_code;
}

// Rank 0's peak resident bytes up to each step.
std::vector<double> peaks(const fs::path& folder) {
  std::vector<double> out;
  for (const auto& [step, mib] : siamese::testing::step_values(folder, "peak_memory_mib"))
    out.push_back(std::stod(mib) * 1048576.0);
  return out;
}

double peak_bytes(const fs::path& folder) {
  const auto all = peaks(folder);
  return all.empty() ? 0.0 : *std::max_element(all.begin(), all.end());
}

struct Launch {
  std::string name, extra;
  int ranks;
};

}  // namespace

// Each run's peak, less its launch's without the model, is within 15% below and 10% above
// the planned peak and activations: what the estimate leaves out is the allocator's slack
// and autograd's temporaries (measured: 4-11% below). And the peak does not creep up from
// step to step: without the reused gather buffers and the free pages handed back after each
// update, FULL_SHARD's grew by a third over 12 steps, by an amount thread timing decided.
TEST(MemoryPeak, ThePlanIsWhatRealRunsHold) {
  const std::string zero2 = " --distributed_strategy=fsdp --fsdp.sharding_strategy=SHARD_GRAD_OP";
  const std::string zero3 = " --distributed_strategy=fsdp --fsdp.sharding_strategy=FULL_SHARD";
  const Launch launches[] = {
      {"one_process", " --device_train_microbatch_size=2", 1},
      {"ddp", " --device_train_microbatch_size=2", 2},
      // Two micro-batches a rank: the whole gradients are kept between them.
      {"shard_grad_op", zero2 + " --device_train_microbatch_size=1", 2},
      // 12 steps: time for its storage to creep up, were it to.
      {"full_shard", zero3 + " --device_train_microbatch_size=2 --max_duration=12", 2},
  };
  for (const Launch& l : launches) {
    const fs::path base = fresh_dir("memory_peak", l.name + "_tiny"), run = fresh_dir("memory_peak", l.name);
    ASSERT_EQ(launch(base, kTiny + l.extra, l.ranks), 0) << read_all(base.string() + ".log");
    ASSERT_EQ(launch(run, kLarge + l.extra, l.ranks), 0) << read_all(run.string() + ".log");
    const double measured = peak_bytes(run) - peak_bytes(base);
    const config::TrainConfig cfg = config::load_config((run / "config.yaml").string(), {});
    const train::RankMemory row = train::rank_memory(cfg, l.ranks, l.ranks, true);
    const double planned = row.peak() + row.activations;
    std::cout << l.name << ": planned " << planned / 1048576.0 << " MiB, measured " << measured / 1048576.0
              << " MiB\n";
    EXPECT_GE(planned, 0.85 * measured) << l.name << ": planned " << planned << ", measured " << measured;
    EXPECT_LE(planned, 1.10 * measured) << l.name << ": planned " << planned << ", measured " << measured;
    // Step 2 has every buffer a step takes (the optimizer state comes with step 1's update).
    // Where a step's peak falls depends on thread timing: a block's gradients still being
    // reduce-scattered when the next block's parameters are gathered, so a later step may
    // peak higher by two blocks' float32 parameters (measured: up to 25 MiB, 1.1 blocks,
    // beside other tests); the creep this guards against added about 250 MiB in 12 steps.
    const auto counts = model::count_parameters(cfg.model);
    const double block =
        4.0 * double(counts.attention + counts.mlp + counts.residual) / double(cfg.model.n_layers);
    const auto run_peaks = peaks(run);
    ASSERT_GE(run_peaks.size(), 3u);
    EXPECT_LE(run_peaks.back() - run_peaks[1], 2 * block)
        << l.name << ": " << run_peaks[1] / 1048576.0 << " MiB at step 2, " << run_peaks.back() / 1048576.0
        << " MiB at the end";
  }
}

// Two SHARD_GRAD_OP ranks on one node whose state would take 95% of the memory under the old
// estimate (the master shard and the whole gradients left out) are refused at once, naming
// the strategy and the key to change, with the code for bad input; nothing is written.
TEST(MemoryPeak, ShardedRanksThatCannotFitAreRefusedBeforeTheyAllocate) {
  const double machine = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  config::TrainConfig c =
      config::load_config(std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/quickstart.yaml", {});
  c.model.d_model = 2048;
  c.model.n_heads = 16;
  c.model.n_layers = 1;
  const double one = model::training_state_bytes(c.model);
  c.model.n_layers = 2;
  const double per_layer = model::training_state_bytes(c.model) - one;
  // 8 bytes a parameter a rank, the old estimate's share of 16 (10 of ddp's 20).
  const int64_t layers = std::llround((0.95 * machine - (one - per_layer)) / per_layer);
  const fs::path run = fresh_dir("memory_peak", "refused");
  const std::string extra =
      " --model.d_model=2048 --model.n_heads=16 --model.n_layers=" + std::to_string(layers) +
      " --distributed_strategy=fsdp --fsdp.sharding_strategy=SHARD_GRAD_OP"
      " --device_train_microbatch_size=2";
  EXPECT_EQ(launch(run, extra, 2), 2) << read_all(run.string() + ".log");
  const std::string log = read_all(run.string() + ".log");
  EXPECT_NE(log.find("under SHARD_GRAD_OP over 2 ranks"), std::string::npos) << log;
  EXPECT_NE(log.find("2 ranks share the memory"), std::string::npos) << log;
  EXPECT_NE(log.find("model.mlp_ratio"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(run / "metrics.jsonl"));
}
