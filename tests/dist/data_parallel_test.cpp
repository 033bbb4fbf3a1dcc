// Data parallelism through the real launcher: 2 CPU ranks (Gloo) started by torchrun
// against 1 process, a run stopped and resumed under torchrun, and a rank killed mid-run;
// on a GPU machine, 2 ranks on its one GPU over Gloo with CUDA tensors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include "siamese/config/load.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"
#include "support/free_port.h"
#include "support/process.h"
#include "support/run_files.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

using siamese::testing::fresh_dir;

namespace fs = std::filesystem;
using namespace siamese;
using siamese::testing::free_port;
using siamese::testing::losses;
using siamese::testing::read_all;
using siamese::testing::step_values;

namespace {

// The tiny hybrid_pre model (or `topology`) every test trains; dropout off so ranks and a
// single process draw no random numbers that could differ.
std::string train_args(const fs::path& folder, int micro, const std::string& extra,
                       const std::string& topology = "hybrid_pre") {
  return " train " + siamese::testing::source_dir() + "/configs/tiny/quickstart.yaml" +
         siamese::testing::topology_flags(topology) +
         " --model.use_query_norm=true --model.use_key_norm=true"
         " --model.use_value_norm=true --model.d_model=32 --model.n_heads=2 --model.n_layers=2"
         " --model.max_sequence_length=32 --model.attention_dropout=0 --model.residual_dropout=0"
         " --global_train_batch_size=4 --device_train_microbatch_size=" +
         std::to_string(micro) +
         " --max_duration=20 --scheduler.t_warmup=3 --optimizer.learning_rate=3e-3"
         " --save_interval=1000 --eval_interval=1000 --eval_subset_num_batches=2"
         " --distributed.bucket_mb=0.01 --save_folder=" +
         folder.string() + " " + extra;
}

int run_single(const fs::path& folder, int micro, const std::string& extra = "",
               const std::string& topology = "hybrid_pre") {
  return siamese::testing::run_cli(train_args(folder, micro, extra, topology), folder.string() + ".log");
}

int run_torchrun(const fs::path& folder, int micro, int master_port, const std::string& extra = "",
                 const std::string& topology = "hybrid_pre") {
  siamese::testing::Limits limits = siamese::testing::under_torchrun(2, master_port);
  limits.timeout_seconds = 1800;
  return siamese::testing::run_siamese(siamese::testing::words(train_args(folder, micro, extra, topology)),
                                       folder.string() + ".log", limits)
      .exit_code;
}

std::vector<torch::Tensor> final_weights(const fs::path& checkpoint) {
  config::TrainConfig cfg = config::load_config((checkpoint / "config.yaml").string(), {});
  model::Transformer m(cfg.model);
  train::load_checkpoint(checkpoint, *m, nullptr);
  return m->parameters();
}

// The checkpoints' weights agree within 1e-4 of each tensor's largest entry, plus `floor`.
void expect_same_weights(const fs::path& a, const fs::path& b, double floor = 0.0) {
  auto w1 = final_weights(a), w2 = final_weights(b);
  ASSERT_EQ(w1.size(), w2.size());
  for (size_t i = 0; i < w1.size(); ++i) {
    const double scale = w1[i].abs().max().item<double>() + 1e-12;
    EXPECT_LT((w1[i] - w2[i]).abs().max().item<double>(), 1e-4 * scale + floor) << "parameter " << i;
  }
}

}  // namespace

TEST(DataParallel, TwoRanksMatchOneProcessWithTheSameGlobalBatch) {
  auto one = fresh_dir("dp_test", "one_rank"), two = fresh_dir("dp_test", "two_ranks");
  ASSERT_EQ(run_single(one, 4), 0) << read_all(one.string() + ".log");
  ASSERT_EQ(run_torchrun(two, 2, free_port()), 0) << read_all(two.string() + ".log");

  auto l1 = losses(one), l2 = losses(two);
  ASSERT_EQ(l1.size(), 20u);
  ASSERT_EQ(l2.size(), 20u) << read_all(two.string() + ".log");
  for (auto& [step, loss] : l1) {
    EXPECT_NEAR(std::stod(loss), std::stod(l2[step]), 1e-5) << "step " << step;
  }
  EXPECT_GT(std::stod(l1[1]) - std::stod(l1[20]), 0.1);  // it trained
  // Only rank 0 logs progress (rank 1: warnings and errors only).
  const std::string log = read_all(two.string() + ".log");
  size_t done_lines = 0;
  for (size_t at = log.find("done: 20 steps"); at != std::string::npos;
       at = log.find("done: 20 steps", at + 1))
    ++done_lines;
  EXPECT_EQ(done_lines, 1u) << log;

  expect_same_weights(one / "step20", two / "step20");
}

// 8 steps of `topology` on 2 ranks follow the single process, weights included (within
// `floor` absolutely, see expect_same_weights). The single process runs micro-batches of
// `single_micro` rows, each rank of `rank_micro`; `extra` settings go to both, and `name`
// tells their folders apart.
void expect_two_ranks_match_one_process(const std::string& topology, double min_drop, double floor = 0.0,
                                        const std::string& extra = "", int single_micro = 4,
                                        int rank_micro = 2, const std::string& name = "") {
  SCOPED_TRACE(topology + name);
  const auto label = siamese::testing::topology_label(topology) + name;
  auto one = fresh_dir("dp_test", label + "_one_rank"), two = fresh_dir("dp_test", label + "_two_ranks");
  ASSERT_EQ(run_single(one, single_micro, "--max_duration=8 " + extra, topology), 0)
      << read_all(one.string() + ".log");
  ASSERT_EQ(run_torchrun(two, rank_micro, free_port(), "--max_duration=8 " + extra, topology), 0)
      << read_all(two.string() + ".log");
  auto l1 = losses(one), l2 = losses(two);
  ASSERT_EQ(l1.size(), 8u);
  ASSERT_EQ(l2.size(), 8u) << read_all(two.string() + ".log");
  for (auto& [step, loss] : l1) EXPECT_NEAR(std::stod(loss), std::stod(l2[step]), 1e-5) << "step " << step;
  // MoE's routing statistics count every rank's tokens: the two ranks' shares are the one
  // process's (each rank alone would see half the batch's assignments).
  for (const char* key : {"moe_lbl_loss", "moe_z_loss", "moe_load_min", "moe_load_max", "moe_load_entropy",
                          "moe_dropped_fraction"}) {
    auto a = step_values(one, key), b = step_values(two, key);
    ASSERT_EQ(a.size(), b.size()) << key;
    for (auto& [step, v] : a) EXPECT_NEAR(std::stod(v), std::stod(b[step]), 1e-5) << key << " step " << step;
  }
  EXPECT_GT(std::stod(l1[1]) - std::stod(l1[8]), min_drop);  // it trained
  expect_same_weights(one / "step8", two / "step8", floor);
}

// nGPT re-normalizes its weights after each step on every rank: the ranks stay identical
// and follow the single process.
TEST(DataParallel, NgptTwoRanksMatchOneProcess) {
  expect_two_ranks_match_one_process("ngpt", 0.05);  // 0.09 in 8 steps
}

// mHC's connection weights are computed from the streams on each rank; their gradients are
// all-reduced like every other parameter's. While the streams are still near copies of the
// embeddings, comb^T H barely depends on the first mixing logits (equal rows stay equal under
// any doubly stochastic comb), so their gradient is mostly rounding noise that Adam turns into
// steps: there 2 ranks and 1 drift apart by up to 9e-5 in 8 steps (measured), hence a floor
// of 3e-4, a tenth of one step at this learning rate. The losses agree to 1e-5 as for ngpt.
TEST(DataParallel, MhcTwoRanksMatchOneProcess) {
  for (const char* topology : {"mhc", "mhc_lite"}) expect_two_ranks_match_one_process(topology, 0.05, 3e-4);
}

// block_type moe: the load-balancing loss is each micro-batch's (OLMo's too), and the ranks
// take the batch's rows in turn, so the micro-batches are single rows on both sides; the
// all-reduced gradients of the router and the experts then follow the single process, and
// the routing statistics, summed over ranks before the shares are taken, are its own.
TEST(DataParallel, MoeTwoRanksMatchOneProcessOfTheSameMicroBatches) {
  expect_two_ranks_match_one_process(
      "hybrid_pre", 0.05, 0.0,
      "--model.block_type=moe --model.moe_num_experts=4 --model.moe_top_k=2 --model.moe_zloss_weight=0.001",
      1, 1, "_moe");
}

// A SiameseNorm coupling beyond post_pre / hybrid_pre (Peri-LN's X: the output norms that
// the fused update does not cover).
TEST(DataParallel, SiameseCouplingTwoRanksMatchOneProcess) {
  expect_two_ranks_match_one_process("siamese/peri", 0.05);
}

// AttnRes's sources and softmax weights are computed per token on each rank; its pseudo-queries'
// gradients are all-reduced like every other parameter's.
TEST(DataParallel, AttnResTwoRanksMatchOneProcess) { expect_two_ranks_match_one_process("attnres", 0.05); }

// Muon's update runs on every rank from the all-reduced gradients, and the z-loss is summed
// over ranks like the loss: 2 ranks follow 1 process, and a run stopped and resumed under
// torchrun repeats both losses exactly.
TEST(DataParallel, MuonWithZLossOnTwoRanksMatchesOneProcessAndResumesExactly) {
  const std::string muon = "--optimizer.name=muon --softmax_auxiliary_loss=true --max_duration=10";
  auto one = fresh_dir("dp_test", "muon_one_rank"), two = fresh_dir("dp_test", "muon_two_ranks"),
       resumed = fresh_dir("dp_test", "muon_resumed");
  ASSERT_EQ(run_single(one, 4, muon), 0) << read_all(one.string() + ".log");
  ASSERT_EQ(run_torchrun(two, 2, free_port(), muon), 0) << read_all(two.string() + ".log");
  ASSERT_EQ(run_torchrun(resumed, 2, free_port(), muon + " --stop-at 4"), 0)
      << read_all(resumed.string() + ".log");
  ASSERT_EQ(run_torchrun(resumed, 2, free_port(), muon), 0) << read_all(resumed.string() + ".log");
  for (const char* key : {"loss", "z_loss"}) {
    auto l1 = step_values(one, key), l2 = step_values(two, key);
    ASSERT_EQ(l1.size(), 10u) << key;
    ASSERT_EQ(l2.size(), 10u) << key << read_all(two.string() + ".log");
    // Summation order differs between 1 and 2 ranks, and Muon's bfloat16 Newton-Schulz
    // rounds such differences up to bfloat16's resolution (measured: 7e-6 after 10 steps).
    for (auto& [step, v] : l1)
      EXPECT_NEAR(std::stod(v) / std::stod(l2[step]), 1.0, 5e-5) << key << " at step " << step;
    EXPECT_EQ(l2, step_values(resumed, key)) << key;
  }
  EXPECT_GT(std::stod(losses(one)[1]) - std::stod(losses(one)[10]), 0.1);  // it trained
}

TEST(DataParallel, StoppedAndResumedUnderTorchrunContinuesExactly) {
  auto a = fresh_dir("dp_test", "uninterrupted"), b = fresh_dir("dp_test", "resumed");
  ASSERT_EQ(run_torchrun(a, 2, free_port()), 0) << read_all(a.string() + ".log");
  ASSERT_EQ(run_torchrun(b, 2, free_port(), "--stop-at 7"), 0) << read_all(b.string() + ".log");
  ASSERT_TRUE(fs::exists(b / "step7"));
  ASSERT_EQ(losses(b).size(), 7u);
  ASSERT_EQ(run_torchrun(b, 2, free_port()), 0) << read_all(b.string() + ".log");
  EXPECT_EQ(losses(a), losses(b));
  EXPECT_EQ(losses(a).size(), 20u);
}

// The global order of instances does not depend on the world size, so a 2-rank run may
// continue as 1 process: same data, same numbers up to summation order.
TEST(DataParallel, ResumesWithADifferentWorldSize) {
  auto a = fresh_dir("dp_test", "ws_reference"), b = fresh_dir("dp_test", "ws_changed");
  ASSERT_EQ(run_single(a, 4), 0) << read_all(a.string() + ".log");
  ASSERT_EQ(run_torchrun(b, 2, free_port(), "--stop-at 7"), 0) << read_all(b.string() + ".log");
  ASSERT_EQ(run_single(b, 4), 0) << read_all(b.string() + ".log");
  auto la = losses(a), lb = losses(b);
  ASSERT_EQ(lb.size(), 20u);
  for (auto& [step, loss] : la) EXPECT_NEAR(std::stod(loss), std::stod(lb[step]), 1e-5) << step;
}

// Rank 1 is killed with SIGKILL (no chance to say goodbye) once training is under way; rank 0,
// blocked in a collective (a gradient reduction, or under FULL_SHARD a block's all-gather
// too), exits non-zero within the timeout saying why.
void expect_killed_rank_ends_the_other(const std::string& name, const std::string& strategy) {
  SCOPED_TRACE(name);
  auto dir = fresh_dir("dp_test", name);
  const int timeout_s = 20;
  const std::string port = std::to_string(free_port());
  const auto args = siamese::testing::words(train_args(
      dir, 2,
      "--max_duration=100000 --distributed.timeout_seconds=" + std::to_string(timeout_s) + " " + strategy));
  auto rank = [&](const char* r) {
    siamese::testing::Limits limits;
    limits.env = {{"RANK", r},
                  {"LOCAL_RANK", r},
                  {"WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", port}};
    limits.timeout_seconds = 600;
    return limits;
  };
  siamese::testing::Child r0(args, dir.string() + ".r0.log", rank("0")),
      r1(args, dir.string() + ".r1.log", rank("1"));
  for (int i = 0; i < 600 && r0.running() &&
                  !(fs::exists(dir / "metrics.jsonl") && fs::file_size(dir / "metrics.jsonl") > 0);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = std::chrono::steady_clock::now();
  r1.kill();
  const siamese::testing::Outcome ended = r0.wait();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r1.wait();
  const std::string& log = ended.output;
  ASSERT_TRUE(fs::exists(dir / "metrics.jsonl")) << log;
  EXPECT_EQ(ended.signal, 0) << log;
  EXPECT_NE(ended.exit_code, 0) << log;
  EXPECT_NE(log.find("another rank probably died"), std::string::npos) << log;
  EXPECT_LT(elapsed, timeout_s + 10.0) << log;
}

TEST(DataParallel, KilledRankMakesTheOtherExitWithAMessageWithinTheTimeout) {
  expect_killed_rank_ends_the_other("killed", "");
  expect_killed_rank_ends_the_other("killed_full_shard",
                                    "--distributed_strategy=fsdp --fsdp.sharding_strategy=FULL_SHARD");
}

// `siamese bench` under torchrun times four setups in one launch: 1 rank, ddp overlapped and
// after backward, and the config's sharded strategy (here FULL_SHARD) on its own model.
// Timings are not asserted (noisy machines); what must hold is the table's arithmetic, that
// the 2-rank setups really communicated while the 1-rank baseline did not, and that the
// sharded setup keeps less state per rank than ddp.
TEST(DataParallel, BenchUnderTorchrunReportsScalingOfEachStrategy) {
  auto dir = fresh_dir("dp_test", "bench");
  const std::string args =
      std::string("bench ") + SIAMESE_SOURCE_DIR +
      "/configs/tiny/quickstart.yaml --model.d_model=32 --model.n_heads=2 --model.n_layers=2"
      " --model.max_sequence_length=32 --global_train_batch_size=8"
      " --device_train_microbatch_size=2 --distributed.bucket_mb=0.01 --steps 3 --warmup 1"
      " --rounds 2 --distributed_strategy=fsdp --fsdp.sharding_strategy=FULL_SHARD";
  siamese::testing::Limits limits = siamese::testing::under_torchrun(2, free_port());
  limits.timeout_seconds = 1800;
  ASSERT_EQ(
      siamese::testing::run_siamese(siamese::testing::words(args), dir.string() + ".log", limits).exit_code,
      0)
      << read_all(dir.string() + ".log");
  const std::string out = read_all(dir.string() + ".log");
  const std::regex row(R"((1 rank|2 ranks, [A-Za-z_, -]+?) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+)% +([\d.]+))");
  std::map<std::string, std::vector<double>> rows;
  for (std::sregex_iterator it(out.begin(), out.end(), row), end; it != end; ++it)
    rows[(*it)[1]] = {std::stod((*it)[2]), std::stod((*it)[3]), std::stod((*it)[4]), std::stod((*it)[5]),
                      std::stod((*it)[6])};
  ASSERT_EQ(rows.size(), 4u) << out;
  ASSERT_TRUE(rows.count("2 ranks, fsdp FULL_SHARD")) << out;
  const double rank_tokens = 4 * 32;  // global batch 8 over 2 ranks, 32 tokens each
  const double single_step = rows["1 rank"][1];
  EXPECT_DOUBLE_EQ(rows["1 rank"][2], 1.0);
  EXPECT_EQ(rows["1 rank"][3], 0.0);
  for (const auto& [name, r] : rows) {
    const int ranks = name == "1 rank" ? 1 : 2;
    EXPECT_NEAR(r[0], ranks * rank_tokens / r[1], 0.01 * r[0] + 1) << name;  // tokens/s
    EXPECT_NEAR(r[2], single_step / r[1], 0.011) << name;                    // efficiency
    if (ranks == 2) {
      EXPECT_GT(r[3], 0.0) << name << ": no time blocked on gradient communication";
    }
  }
  // State per rank: ddp adds its buckets to one process's; FULL_SHARD halves most of it.
  const double one = rows["1 rank"][4], ddp = rows["2 ranks, ddp, all-reduce after backward"][4];
  EXPECT_EQ(rows["2 ranks, ddp, all-reduce overlapped"][4], ddp);
  EXPECT_GT(ddp, one);
  EXPECT_LT(rows["2 ranks, fsdp FULL_SHARD"][4], 0.75 * one);
}

// Ranks that resolved different configs (here the layer count comes from RANK, so the
// parameter shapes differ) refuse together before the first collective, naming the key,
// instead of aborting inside Gloo or waiting for the timeout.
TEST(DataParallel, RanksWithDifferentConfigsRefuseTogetherNamingTheKey) {
  auto dir = fresh_dir("dp_test", "disagree");
  const int rc = run_torchrun(dir, 2, free_port(),
                              "'--model.n_layers=1${oc.env:RANK}' --distributed.timeout_seconds=60");
  const std::string log = read_all(dir.string() + ".log");
  EXPECT_NE(rc, 0) << log;
  EXPECT_NE(log.find("launched with different settings: model.n_layers"), std::string::npos) << log;
  EXPECT_EQ(log.find("SIGABRT"), std::string::npos) << log;
  EXPECT_EQ(log.find("timed out"), std::string::npos) << log;
}

// Two ranks on the machine's one GPU (device cuda:0 for both) over Gloo with CUDA tensors, as
// NCCL refuses two ranks on one device: ddp's bucketed all-reduce and FULL_SHARD's gathers,
// reduce-scatters, sharded clipping and update run on CUDA tensors, Gloo copying them to host
// memory and back on streams of its own, and follow one process on the same GPU for 20 steps.
// The process runs the ranks' micro-batches one after the other, so every matmul has the
// ranks' shapes. 1e-4: CUDA's backward adds some gradients with atomics, in no fixed order,
// and 20 AdamW steps grow those roundings; a lost, doubled or stale gradient or shard moves
// the loss by more than 1e-2 within a few steps.
TEST(GpuDist, TwoGlooRanksOnOneGpuFollowOneProcess) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU tests run on the GPU machine";
  const std::string gpu = "--device=cuda:0 --allow_tf32=false ";
  for (const std::string strategy :
       {"--distributed_strategy=ddp", "--distributed_strategy=fsdp --fsdp.sharding_strategy=FULL_SHARD"}) {
    SCOPED_TRACE(strategy);
    const std::string name = strategy.find("FULL_SHARD") == std::string::npos ? "ddp" : "full_shard";
    auto one = fresh_dir("dp_test", "gpu_" + name + "_one"),
         two = fresh_dir("dp_test", "gpu_" + name + "_two");
    ASSERT_EQ(run_single(one, 2, gpu), 0) << read_all(one.string() + ".log");
    ASSERT_EQ(run_torchrun(two, 2, free_port(), gpu + "--distributed.backend=gloo " + strategy), 0)
        << read_all(two.string() + ".log");
    auto l1 = losses(one), l2 = losses(two);
    ASSERT_EQ(l1.size(), 20u);
    ASSERT_EQ(l2.size(), 20u) << read_all(two.string() + ".log");
    for (auto& [step, loss] : l1) EXPECT_NEAR(std::stod(loss), std::stod(l2[step]), 1e-4) << "step " << step;
    EXPECT_GT(std::stod(l1[1]) - std::stod(l1[20]), 0.1);  // it trained
  }
}
