// fsdp SHARD_GRAD_OP (ZeRO-2) through the real launcher: 2 CPU ranks (Gloo reduce_scatter /
// all_gather) against 1 process with the same global batch, the optimizer state each rank
// holds against ddp's, and sharded checkpoints resumed on 2, 1 and (from 1) 2 ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/config/validate.h"
#include "siamese/dist/sharded.h"
#include "siamese/model/accounting.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/checkpoint_writer.h"
#include "siamese/train/memory_plan.h"
#include "siamese/train/parallelize.h"
#include "siamese/train/save_folder.h"
#include "support/free_port.h"
#include "support/process.h"
#include "support/refusal.h"
#include "support/run_files.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace siamese;
using siamese::testing::free_port;
using siamese::testing::fresh_dir;
using siamese::testing::losses;
using siamese::testing::read_all;
using siamese::testing::step_values;

namespace {

const std::string kZero2 = "--distributed_strategy=fsdp --fsdp.sharding_strategy=SHARD_GRAD_OP";

// The tiny model of data_parallel_test.cpp, a checkpoint at step 10 and 20.
std::string zero2_args(const fs::path& folder, int micro, const std::string& extra) {
  return std::string(" train ") + SIAMESE_SOURCE_DIR + "/configs/tiny/quickstart.yaml" +
         " --model.residual=hybrid_pre --model.d_model=32 --model.n_heads=2 --model.n_layers=2"
         " --model.max_sequence_length=32 --model.attention_dropout=0 --model.residual_dropout=0"
         " --global_train_batch_size=4 --device_train_microbatch_size=" +
         std::to_string(micro) +
         " --max_duration=20 --scheduler.t_warmup=3 --optimizer.learning_rate=3e-3 --max_grad_norm=0.5"
         " --optimizer.metrics_log_interval=5"
         " --save_interval=10 --save_num_checkpoints_to_keep=-1 --eval_interval=1000 "
         "--distributed.bucket_mb=0.01 --save_folder=" +
         folder.string() + " " + extra;
}

int zero2_single(const fs::path& folder, const std::string& extra = "") {
  return siamese::testing::run_cli(zero2_args(folder, 4, extra), folder.string() + ".log");
}

int zero2_torchrun(const fs::path& folder, const std::string& extra, int micro = 2) {
  siamese::testing::Limits limits = siamese::testing::under_torchrun(2, free_port());
  limits.timeout_seconds = 1800;
  return siamese::testing::run_siamese(siamese::testing::words(zero2_args(folder, micro, extra)),
                                       folder.string() + ".log", limits)
      .exit_code;
}

// `nproc` ranks of the tiny model, launched as `nodes` torchrun agents on this host (static
// rendezvous), so each rank's LOCAL_WORLD_SIZE is nproc / nodes as on that many machines.
// Returns 0 when every agent did; the agents' logs follow each other in `folder`.log.
int zero2_launch(const fs::path& folder, const std::string& extra, int nproc, int nodes) {
  const std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<siamese::testing::Child>> agents;
  for (int node = 0; node < nodes; ++node) {
    siamese::testing::Limits limits;
    limits.launcher = {std::string(SIAMESE_SOURCE_DIR) + "/scripts/torchrun",
                       "--nnodes",
                       std::to_string(nodes),
                       "--node_rank",
                       std::to_string(node),
                       "--nproc_per_node",
                       std::to_string(nproc / nodes),
                       "--master_addr",
                       "127.0.0.1",
                       "--master_port",
                       port};
    limits.timeout_seconds = 1800;
    agents.push_back(std::make_unique<siamese::testing::Child>(
        siamese::testing::words(zero2_args(folder, 1, extra)),
        folder.string() + ".node" + std::to_string(node) + ".log", limits));
  }
  int rc = 0;
  std::string logs;
  for (auto& agent : agents) {
    const siamese::testing::Outcome o = agent->wait();
    if (o.exit_code != 0) rc = 1;
    logs += o.output;
  }
  std::ofstream(folder.string() + ".log") << logs;
  return rc;
}

// Bytes of parameters, gradients and optimizer state rank 0's start-up log says it holds.
std::vector<int64_t> zero2_held_bytes(const fs::path& folder) {
  const std::string log = read_all(folder.string() + ".log");
  std::smatch m;
  const std::regex re(
      R"(each holds (\d+) bytes of parameters, (\d+) bytes of gradients, (\d+) bytes of optimizer state)");
  if (!std::regex_search(log, m, re)) return {};
  return {std::stoll(m[1]), std::stoll(m[2]), std::stoll(m[3])};
}

std::vector<torch::Tensor> zero2_weights(const fs::path& checkpoint) {
  config::TrainConfig cfg = config::load_config((checkpoint / "config.yaml").string(), {});
  model::Transformer m(cfg.model);
  train::load_checkpoint(checkpoint, *m, nullptr);
  return m->parameters();
}

// step -> the per-layer gradient norms metrics.jsonl holds.
std::map<int64_t, std::vector<double>> zero2_layer_norms(const fs::path& folder) {
  std::map<int64_t, std::vector<double>> out;
  std::ifstream in(folder / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (row.contains("layer_grad_norms"))
      out[row.at("step").get<int64_t>()] = row.at("layer_grad_norms").get<std::vector<double>>();
  }
  return out;
}

// Bytes of parameters a rank holds between steps when the blocks are sharded over `ranks`.
// FULL_SHARD's parameter bytes on `ranks` ranks: the outside parameters whole, and the
// master shard of every parameter, the blocks' only copy.
int64_t block_sharded_bytes(const config::TrainConfig& cfg, int ranks) {
  model::Transformer m(cfg.model);
  int64_t held = 0;
  for (const auto& p : m->named_parameters()) {
    const bool in_block = model::parse_param_name(p.key()).layer.has_value();
    held += 4 * (dist::shard_chunk(p.value().numel(), ranks) + (in_block ? 0 : p.value().numel()));
  }
  return held;
}

void expect_zero2_losses_near(const fs::path& reference, const fs::path& run, size_t steps) {
  auto want = losses(reference), got = losses(run);
  ASSERT_EQ(got.size(), steps) << read_all(run.string() + ".log");
  for (auto& [step, loss] : got)
    EXPECT_NEAR(std::stod(loss), std::stod(want.at(step)), 1e-5) << "step " << step;
}

}  // namespace

TEST(Sharded, PiecesPutTogetherGiveTheTensorBack) {
  const auto whole = torch::arange(7, torch::kFloat).view({7});
  for (int world : {1, 2, 3, 8}) {
    std::vector<torch::Tensor> pieces;
    for (int r = 0; r < world; ++r) pieces.push_back(dist::shard_piece(whole, r, world));
    EXPECT_EQ(pieces.front().numel(), dist::shard_chunk(7, world));
    EXPECT_TRUE(torch::equal(dist::unshard(pieces, {7}), whole)) << world;
  }
  // The padding of the last piece is zero: it never moves the optimizer.
  EXPECT_TRUE(torch::equal(dist::shard_piece(whole, 1, 2), torch::tensor({4.f, 5.f, 6.f, 0.f})));
}

TEST(Sharded, StrategiesNotImplementedAreRefusedNamingTheKey) {
  config::TrainConfig c;
  c.distributed_strategy = config::DistributedStrategy::Fsdp;
  for (const auto s : {config::ShardingStrategy::ShardGradOp, config::ShardingStrategy::FullShard,
                       config::ShardingStrategy::HybridShard}) {
    c.fsdp.sharding_strategy = s;
    EXPECT_NO_THROW(validate(c));
    c.model.block_type = config::BlockType::Moe;
    c.model.activation_checkpointing = config::ActivationCheckpointing::OneInTwo;
    EXPECT_NO_THROW(validate(c));
    c.model.block_type = config::BlockType::Sequential;
    c.model.activation_checkpointing = config::ActivationCheckpointing::None;
  }
  // nGPT rewrites whole weight rows after each step: refused where parameters are sharded,
  // before any connection, naming the key.
  const std::string config = std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/base.yaml";
  const auto ngpt_under = [&](const std::string& strategy) {
    return model::load_run_config(
        config,
        {"--model.residual=ngpt", "--distributed_strategy=fsdp", "--fsdp.sharding_strategy=" + strategy}, {});
  };
  EXPECT_NO_THROW(train::check_plan_fits_model(config::parallel_section(ngpt_under("SHARD_GRAD_OP"))));
  for (const std::string strategy : {"FULL_SHARD", "HYBRID_SHARD"}) {
    const config::TrainConfig ngpt = ngpt_under(strategy);
    try {
      train::check_plan_fits_model(config::parallel_section(ngpt));
      ADD_FAILURE() << "ngpt with " << strategy << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("fsdp.sharding_strategy"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("whole weight matrices"), std::string::npos) << e.what();
    }
  }
}

// distributed.backend: auto leaves the choice to the Communicator (NCCL for CUDA tensors, Gloo
// for CPU ones), gloo takes Gloo for both, and nccl on the CPU is refused before any
// connection, naming the key.
TEST(Sharded, CommBackendFollowsTheKeyAndRefusesNcclOnTheCpu) {
  config::DistributedConfig d;
  const torch::Device cpu(torch::kCPU), gpu(torch::kCUDA, 0);
  EXPECT_EQ(train::comm_backend(d, cpu), std::nullopt);
  EXPECT_EQ(train::comm_backend(d, gpu), std::nullopt);
  d.backend = config::CommBackend::Gloo;
  EXPECT_EQ(train::comm_backend(d, gpu), dist::Backend::Gloo);
  d.backend = config::CommBackend::Nccl;
  EXPECT_EQ(train::comm_backend(d, gpu), dist::Backend::Nccl);
  siamese::testing::expect_refused([&] { train::comm_backend(d, cpu); }, "distributed.backend",
                                   "distributed.backend: auto");
}

// An OLMo file may set fsdp.* and leave distributed_strategy at our default (ddp): the keys
// are named as having no effect, and are not once the strategy is fsdp.
TEST(Sharded, FsdpKeysUnderDdpAreNamedAsHavingNoEffect) {
  const auto scratch = fresh_dir("sharded_warn", "cli");
  fs::create_directories(scratch);
  const auto ddp = siamese::testing::run_siamese(
      "config configs/tiny/base.yaml --fsdp.sharding_strategy=FULL_SHARD", scratch);
  ASSERT_EQ(ddp.exit_code, 0) << ddp.err;
  EXPECT_NE((ddp.output + ddp.err).find("fsdp.sharding_strategy has no effect: distributed_strategy is ddp"),
            std::string::npos)
      << ddp.output << ddp.err;
  const auto fsdp = siamese::testing::run_siamese(
      "config configs/tiny/base.yaml --fsdp.sharding_strategy=FULL_SHARD --distributed_strategy=fsdp",
      scratch);
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.err;
  EXPECT_EQ((fsdp.output + fsdp.err).find("has no effect"), std::string::npos) << fsdp.output << fsdp.err;
}

// With every block checkpointed, hybrid_pre's next-sublayer input norms get a gradient from
// two recomputations. ddp and SHARD_GRAD_OP on 2 ranks must reduce both (they used to reduce
// a bucket at the first: step 2's loss was off by 1.6e-2).
TEST(Sharded, CheckpointedBlocksReduceEveryGradientUnderEachStrategy) {
  const std::string kSteps = " --max_duration=6 --activation_checkpointing=whole_layer";
  auto one = fresh_dir("sharded_ckpt", "one"), ddp = fresh_dir("sharded_ckpt", "ddp"),
       zero2 = fresh_dir("sharded_ckpt", "zero2");
  ASSERT_EQ(zero2_single(one, kSteps), 0) << read_all(one.string() + ".log");
  ASSERT_EQ(zero2_torchrun(ddp, kSteps), 0) << read_all(ddp.string() + ".log");
  ASSERT_EQ(zero2_torchrun(zero2, kZero2 + kSteps), 0) << read_all(zero2.string() + ".log");
  expect_zero2_losses_near(one, ddp, 6);
  expect_zero2_losses_near(one, zero2, 6);
}

// FULL_SHARD (ZeRO-3) on 2 ranks trains the 1-process model: losses within 1e-5 over 20
// steps, also with every block checkpointed and two micro-batches per rank (gradients
// accumulated between gathers); final weights within the ddp bound of 1 process's. Each
// rank holds the blocks' parameters as its half and the rest whole, as `inspect
// --world-size` predicts; resumed on 2 ranks the losses repeat exactly, on 1 within 1e-5.
TEST(Sharded, FullShardOnTwoRanksMatchesOneProcessHoldsHalfTheBlocksAndResumes) {
  const std::string kFull = "--distributed_strategy=fsdp --fsdp.sharding_strategy=FULL_SHARD";
  auto one = fresh_dir("sharded_full", "one"), full = fresh_dir("sharded_full", "full"),
       checkpointed = fresh_dir("sharded_full", "checkpointed"), again = fresh_dir("sharded_full", "resumed"),
       down = fresh_dir("sharded_full", "two_to_one");
  ASSERT_EQ(zero2_single(one), 0) << read_all(one.string() + ".log");
  ASSERT_EQ(zero2_torchrun(full, kFull), 0) << read_all(full.string() + ".log");
  EXPECT_NE(read_all(full.string() + ".log").find("fsdp FULL_SHARD"), std::string::npos);
  expect_zero2_losses_near(one, full, 20);
  ASSERT_EQ(zero2_torchrun(checkpointed, kFull + " --activation_checkpointing=whole_layer", 1), 0)
      << read_all(checkpointed.string() + ".log");
  expect_zero2_losses_near(one, checkpointed, 20);
  const auto norms1 = zero2_layer_norms(one), norms2 = zero2_layer_norms(full);
  ASSERT_EQ(norms2.size(), norms1.size());
  for (const auto& [step, n] : norms1)
    for (size_t l = 0; l < n.size(); ++l) EXPECT_NEAR(norms2.at(step).at(l), n[l], 1e-5 * n[l]) << step;

  const auto w1 = zero2_weights(one / "step20"), w2 = zero2_weights(full / "step20");
  ASSERT_EQ(w1.size(), w2.size());
  for (size_t i = 0; i < w1.size(); ++i)
    EXPECT_LE((w1[i] - w2[i]).abs().max().item<double>(), 1e-4 * w1[i].abs().max().item<double>())
        << "parameter " << i;

  const config::TrainConfig cfg = config::load_config((full / "step20" / "config.yaml").string(), {});
  model::Transformer m(cfg.model);
  const int64_t held = block_sharded_bytes(cfg, 2);
  int64_t whole = 0;
  for (const auto& p : m->parameters()) whole += 4 * p.numel();
  const auto bytes = zero2_held_bytes(full);
  ASSERT_EQ(bytes.size(), 3u) << read_all(full.string() + ".log");
  EXPECT_EQ(bytes[0], held);
  EXPECT_LT(bytes[0], whole);
  const auto plan = train::plan_memory(cfg, 2, 8, true);
  ASSERT_EQ(plan[2].strategy, "FULL_SHARD");
  // The plan differs by the chunks' padding (up to 4 bytes a tensor) and the topology's
  // vectors outside the blocks (final norms, one per stream, and their shards), which the
  // plan counts with the blocks' parameters: sharded, not whole.
  EXPECT_NEAR(plan[2].parameters, double(held),
              4.0 * double(m->named_parameters().size()) + 4.0 * 3.0 * double(cfg.model.d_model));

  ASSERT_EQ(zero2_torchrun(again, kFull + " --load_path=" + (full / "step10").string()), 0)
      << read_all(again.string() + ".log");
  auto resumed = losses(again), uninterrupted = losses(full);
  ASSERT_EQ(resumed.size(), 10u);
  for (auto& [step, loss] : resumed) EXPECT_EQ(loss, uninterrupted.at(step)) << "step " << step;
  ASSERT_EQ(zero2_single(down, "--load_path=" + (full / "step10").string()), 0)
      << read_all(down.string() + ".log");
  expect_zero2_losses_near(one, down, 10);
}

// 2 ranks with ZeRO-2 train the 1-process model: losses within 1e-5 over 20 steps (with
// global clipping active), final weights within 1e-5 of each tensor's largest entry of
// ddp's on 2 ranks (and within the ddp test's 1e-4 of 1 process's); each rank
// holds half of ddp's optimizer state (each parameter's chunk, padded to even length).
// Resumed from the step-10 checkpoint on 2 ranks the losses repeat exactly; on 1 rank, and
// from the 1-process checkpoint on 2 ranks (units by block), within 1e-5. Per-layer gradient
// norms match. A damaged shard voids its checkpoint.
TEST(Sharded, ShardGradOpOnTwoRanksMatchesOneProcessAndReshardsOnResume) {
  auto one = fresh_dir("sharded_test", "one"), two = fresh_dir("sharded_test", "two"),
       ddp = fresh_dir("sharded_test", "ddp"), again = fresh_dir("sharded_test", "two_resumed"),
       down = fresh_dir("sharded_test", "two_to_one"), up = fresh_dir("sharded_test", "one_to_two");
  ASSERT_EQ(zero2_single(one), 0) << read_all(one.string() + ".log");
  ASSERT_EQ(zero2_torchrun(two, kZero2), 0) << read_all(two.string() + ".log");
  expect_zero2_losses_near(one, two, 20);
  EXPECT_GT(std::stod(losses(one)[1]) - std::stod(losses(one)[20]), 0.1);  // it trained
  // Per-layer gradient norms, summed over the shards, are the 1-process ones.
  const auto norms1 = zero2_layer_norms(one), norms2 = zero2_layer_norms(two);
  ASSERT_EQ(norms1.size(), 4u);
  ASSERT_EQ(norms2.size(), 4u);
  for (const auto& [step, n] : norms1)
    for (size_t l = 0; l < n.size(); ++l) EXPECT_NEAR(norms2.at(step).at(l), n[l], 1e-5 * n[l]) << step;

  ASSERT_EQ(zero2_torchrun(ddp, ""), 0) << read_all(ddp.string() + ".log");
  const auto w1 = zero2_weights(one / "step20"), w2 = zero2_weights(two / "step20"),
             replicas = zero2_weights(ddp / "step20");
  ASSERT_EQ(w1.size(), w2.size());
  for (size_t i = 0; i < w1.size(); ++i) {
    const double scale = w1[i].abs().max().item<double>();
    // Against 1 process, the ddp test's bound: 2 ranks sum in another order, and Adam turns
    // the embedding rows' rounding into steps (ddp differs from 1 process as much, 1.7e-5).
    EXPECT_LE((w1[i] - w2[i]).abs().max().item<double>(), 1e-4 * scale) << "parameter " << i;
    // Against ddp on the same 2 ranks (measured: at most 1.1e-6).
    EXPECT_LE((replicas[i] - w2[i]).abs().max().item<double>(), 1e-5 * scale) << "parameter " << i;
  }

  const auto sharded = zero2_held_bytes(two), replicated = zero2_held_bytes(ddp);
  ASSERT_EQ(sharded.size(), 3u) << read_all(two.string() + ".log");
  ASSERT_EQ(replicated.size(), 3u) << read_all(ddp.string() + ".log");
  int64_t half = 0, whole = 0, master = 0;
  for (const auto& p : w1) {
    half += 2 * dist::shard_chunk(p.numel(), 2) * 4 + 4;  // two moments of the chunk, a float32 step count
    whole += 2 * p.numel() * 4 + 4;
    master += dist::shard_chunk(p.numel(), 2) * 4;
  }
  EXPECT_EQ(replicated[2], whole);
  EXPECT_EQ(sharded[2], half);
  EXPECT_LE(2 * sharded[2], replicated[2] + 8 * int64_t(w1.size()));
  // Parameters stay whole under SHARD_GRAD_OP, beside a float32 master shard.
  EXPECT_EQ(sharded[0], replicated[0] + master);
  EXPECT_LT(2 * sharded[1], replicated[1]);
  // `siamese inspect --world-size` predicts these bytes: exactly, but for AdamW's step counts
  // (4 bytes a parameter) and the chunks' padding.
  const config::TrainConfig cfg = config::load_config((two / "step20" / "config.yaml").string(), {});
  const auto plan = train::plan_memory(cfg, 2, 8, true);
  const double slack = 4.0 * double(w1.size());
  EXPECT_EQ(plan[0].parameters, double(replicated[0]));
  EXPECT_EQ(plan[0].gradients, double(replicated[1]));
  EXPECT_NEAR(plan[0].optimizer, double(replicated[2]), slack);
  EXPECT_NEAR(plan[1].parameters, double(sharded[0]), slack);
  EXPECT_NEAR(plan[1].optimizer, double(sharded[2]), 3 * slack);
  EXPECT_NEAR(plan[1].gradients, double(sharded[1]), 2 * slack);

  // The checkpoint holds one optimizer shard per rank, each listed in the manifest.
  EXPECT_TRUE(fs::exists(two / "step10" / train::optimizer_shard_name(1, 2)));
  EXPECT_FALSE(fs::exists(two / "step10" / "optim.pt"));

  ASSERT_EQ(zero2_torchrun(again, kZero2 + " --load_path=" + (two / "step10").string()), 0)
      << read_all(again.string() + ".log");
  auto resumed = losses(again), uninterrupted = losses(two);
  ASSERT_EQ(resumed.size(), 10u);
  for (auto& [step, loss] : resumed) EXPECT_EQ(loss, uninterrupted.at(step)) << "step " << step;

  ASSERT_EQ(zero2_single(down, "--load_path=" + (two / "step10").string()), 0)
      << read_all(down.string() + ".log");
  expect_zero2_losses_near(one, down, 10);
  // Units of one block each (fsdp.wrapping_strategy by_block) shard the same numbers.
  ASSERT_EQ(zero2_torchrun(
                up, kZero2 + " --fsdp.wrapping_strategy=by_block --load_path=" + (one / "step10").string()),
            0)
      << read_all(up.string() + ".log");
  expect_zero2_losses_near(one, up, 10);

  // A checkpoint counts only when every shard verifies: with one shard's bytes changed the
  // newest complete checkpoint is the one before, and shards staged by a save that was cut
  // short are cleared at the next start.
  const fs::path shard = two / "step20" / train::optimizer_shard_name(1, 2);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  const auto problem = train::checkpoint_problem(two / "step20");
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find(train::optimizer_shard_name(1, 2)), std::string::npos) << *problem;
  EXPECT_EQ(train::latest_checkpoint(two), two / "step10");
  const fs::path staged = train::staging_folder(two, 30, 12345);
  fs::create_directories(staged);
  std::ofstream(staged / train::optimizer_shard_name(0, 2)) << "partial";
  std::ofstream(staged / train::model_part_name(1, 2)) << "partial";
  {
    train::SaveFolderLock lock(two, "a test");
    train::clean_save_folder(two, lock);
  }
  EXPECT_FALSE(fs::exists(staged));
}

// HYBRID_SHARD on 4 ranks as 2 nodes of 2 (two torchrun agents): 2 replicas of a model
// sharded over each node's 2 ranks trains the 1-process model (losses within 1e-5 over 20
// steps), and an explicit fsdp.hybrid_sharding_num_model_replicas: 2 on one agent of 4 groups
// the ranks the same way, bit for bit. Each rank holds half the blocks, the checkpoint has one
// optimizer shard per rank of a node (written by the first node only), and it resumes on 4
// ranks exactly and on 3 (FULL_SHARD, re-sharded) within 1e-5.
TEST(Sharded, HybridShardShardsWithinANodeAndReplicatesAcrossNodes) {
  const std::string kHybrid =
      "--distributed_strategy=fsdp --fsdp.sharding_strategy=HYBRID_SHARD --global_train_batch_size=12";
  auto one = fresh_dir("sharded_hybrid", "one"), nodes = fresh_dir("sharded_hybrid", "two_nodes"),
       keyed = fresh_dir("sharded_hybrid", "replicas_key"), again = fresh_dir("sharded_hybrid", "resumed"),
       three = fresh_dir("sharded_hybrid", "four_to_three");
  ASSERT_EQ(zero2_single(one, "--global_train_batch_size=12"), 0) << read_all(one.string() + ".log");
  ASSERT_EQ(zero2_launch(nodes, kHybrid, 4, 2), 0) << read_all(nodes.string() + ".log");
  EXPECT_NE(read_all(nodes.string() + ".log").find("HYBRID_SHARD (FULL_SHARD over 2 ranks, 2 replicas)"),
            std::string::npos)
      << read_all(nodes.string() + ".log");
  expect_zero2_losses_near(one, nodes, 20);

  ASSERT_EQ(zero2_launch(keyed, kHybrid + " --fsdp.hybrid_sharding_num_model_replicas=2", 4, 1), 0)
      << read_all(keyed.string() + ".log");
  EXPECT_EQ(losses(keyed), losses(nodes));

  const config::TrainConfig cfg = config::load_config((nodes / "step20" / "config.yaml").string(), {});
  const auto bytes = zero2_held_bytes(nodes);
  ASSERT_EQ(bytes.size(), 3u) << read_all(nodes.string() + ".log");
  EXPECT_EQ(bytes[0], block_sharded_bytes(cfg, 2));
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(fs::exists(nodes / "step10" / train::optimizer_shard_name(r, 2)));
  EXPECT_FALSE(fs::exists(nodes / "step10" / train::optimizer_shard_name(2, 4)));
  EXPECT_FALSE(train::checkpoint_problem(nodes / "step20").has_value());
  // The planner's shard group follows the key: 4 ranks in 2 replicas shard like 2 ranks.
  config::TrainConfig keyed_cfg = cfg;
  keyed_cfg.fsdp.hybrid_sharding_num_model_replicas = 2;
  EXPECT_EQ(train::plan_memory(keyed_cfg, 4, 4, true)[3].parameters,
            train::plan_memory(cfg, 2, 2, true)[2].parameters);

  ASSERT_EQ(zero2_launch(again, kHybrid + " --load_path=" + (nodes / "step10").string(), 4, 2), 0)
      << read_all(again.string() + ".log");
  auto resumed = losses(again), uninterrupted = losses(nodes);
  ASSERT_EQ(resumed.size(), 10u);
  for (auto& [step, loss] : resumed) EXPECT_EQ(loss, uninterrupted.at(step)) << "step " << step;
  ASSERT_EQ(zero2_launch(three,
                         "--distributed_strategy=fsdp --fsdp.sharding_strategy=FULL_SHARD "
                         "--global_train_batch_size=12 --load_path=" +
                             (nodes / "step10").string(),
                         3, 1),
            0)
      << read_all(three.string() + ".log");
  expect_zero2_losses_near(one, three, 10);
}

// Without the key, the grouping comes from the launcher: a launch that does not say how many
// ranks share a node is refused with a message naming the key to set.
TEST(Sharded, HybridShardWithoutANodeSizeNamesTheKey) {
  auto dir = fresh_dir("sharded_hybrid", "no_node_size");
  siamese::testing::Limits limits;
  limits.env = {{"RANK", "0"},
                {"LOCAL_RANK", "0"},
                {"WORLD_SIZE", "2"},
                {"LOCAL_WORLD_SIZE", "3"},
                {"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(free_port())}};
  const siamese::testing::Outcome refused = siamese::testing::run_siamese(
      siamese::testing::words(
          zero2_args(dir, 1, "--distributed_strategy=fsdp --fsdp.sharding_strategy=HYBRID_SHARD")),
      dir.string() + ".log", limits);
  EXPECT_NE(refused.exit_code, 0);
  const std::string& log = refused.output;
  EXPECT_NE(log.find("fsdp.hybrid_sharding_num_model_replicas"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(dir / "metrics.jsonl"));
}

// Muon under sharding: each rank updates its chunks, Newton-Schulz runs on the gathered
// direction. SHARD_GRAD_OP and FULL_SHARD take the same steps bit for bit, and stay within
// 2e-4 of ddp's and 1 process's losses over 20 steps. That is rounding: with clipping active
// the global norm is summed from shards, and Newton-Schulz in bf16 amplifies the last bits
// (measured: sharded vs ddp 6.6e-5 at step 20, ddp vs 1 process 8.4e-5). Newton-Schulz of
// a chunk instead of the whole matrix would take other steps entirely. Resumed, exactly.
TEST(Sharded, MuonOnShardsTakesTheStepsOfWholeMatrices) {
  const std::string kMuon = " --optimizer.name=muon";
  auto one = fresh_dir("sharded_muon", "one"), ddp = fresh_dir("sharded_muon", "ddp"),
       zero2 = fresh_dir("sharded_muon", "zero2"), full = fresh_dir("sharded_muon", "full"),
       again = fresh_dir("sharded_muon", "resumed");
  ASSERT_EQ(zero2_single(one, kMuon), 0) << read_all(one.string() + ".log");
  ASSERT_EQ(zero2_torchrun(ddp, kMuon), 0) << read_all(ddp.string() + ".log");
  ASSERT_EQ(zero2_torchrun(zero2, kZero2 + kMuon), 0) << read_all(zero2.string() + ".log");
  const std::string kFull = "--distributed_strategy=fsdp --fsdp.sharding_strategy=FULL_SHARD" + kMuon;
  ASSERT_EQ(zero2_torchrun(full, kFull), 0) << read_all(full.string() + ".log");
  EXPECT_EQ(losses(full), losses(zero2));
  auto base = losses(one);
  EXPECT_GT(std::stod(base[1]) - std::stod(base[20]), 0.5);  // it trained
  for (const auto& run : {ddp, zero2}) {
    const auto got = losses(run);
    ASSERT_EQ(got.size(), 20u) << run;
    for (auto& [step, loss] : got)
      EXPECT_NEAR(std::stod(loss), std::stod(base.at(step)), 2e-4) << run << step;
  }
  ASSERT_EQ(zero2_torchrun(again, kFull + " --load_path=" + (full / "step10").string()), 0)
      << read_all(again.string() + ".log");
  auto resumed = losses(again), uninterrupted = losses(full);
  ASSERT_EQ(resumed.size(), 10u);
  for (auto& [step, loss] : resumed) EXPECT_EQ(loss, uninterrupted.at(step)) << "step " << step;
}

namespace {

// fsdp.precision pure under amp_bf16: each unit's gradients are reduce-scattered in bf16 (the
// log says so), then kept, clipped and stepped in float32. The step-1 loss is the same as
// mixed's (no update yet); the trajectory after it moves by the bf16 rounding of the summed
// gradients only (1e-4 relative over 20 steps here), and FULL_SHARD takes the same steps as
// SHARD_GRAD_OP.
TEST(Sharded, PureReducesGradientsInTheAutocastDtype) {
  const std::string kBf16 = " --precision=amp_bf16";
  auto mixed = fresh_dir("sharded_pure", "mixed"), pure = fresh_dir("sharded_pure", "pure"),
       full = fresh_dir("sharded_pure", "full");
  ASSERT_EQ(zero2_torchrun(mixed, kZero2 + kBf16 + " --fsdp.precision=mixed"), 0)
      << read_all(mixed.string() + ".log");
  ASSERT_EQ(zero2_torchrun(pure, kZero2 + kBf16 + " --fsdp.precision=pure"), 0)
      << read_all(pure.string() + ".log");
  ASSERT_EQ(zero2_torchrun(full, "--distributed_strategy=fsdp --fsdp.sharding_strategy=FULL_SHARD" + kBf16 +
                                     " --fsdp.precision=pure"),
            0)
      << read_all(full.string() + ".log");
  EXPECT_EQ(read_all(mixed.string() + ".log").find("gradients reduced in"), std::string::npos);
  for (const auto& run : {pure, full})
    EXPECT_NE(read_all(run.string() + ".log").find("gradients reduced in BFloat16"), std::string::npos)
        << read_all(run.string() + ".log");
  const auto want = losses(mixed);
  ASSERT_EQ(want.size(), 20u);
  for (const auto& run : {pure, full}) {
    const auto got = losses(run);
    ASSERT_EQ(got.size(), 20u) << run;
    EXPECT_EQ(got.at(1), want.at(1)) << run;
    bool moved = false;
    for (auto& [step, loss] : got) {
      EXPECT_NEAR(std::stod(loss), std::stod(want.at(step)), 1e-3 * std::stod(want.at(step))) << run << step;
      moved = moved || loss != want.at(step);
    }
    EXPECT_TRUE(moved) << run << ": bf16 reductions left every loss as float32's";
  }
  EXPECT_EQ(losses(full), losses(pure));
}

}  // namespace

namespace {

// FULL_SHARD with block_type moe and with every other block recomputed (one_in_two), where a
// parameter two blocks read gets its gradient in two pieces: the blocks finish in block order
// from the backward's progress, not from gradient counts, so both take SHARD_GRAD_OP's steps
// (2 ranks, micro-batches of 2 rows each side) and hold fewer parameter bytes.
TEST(Sharded, FullShardTrainsMoeAndPartlyRecomputedBlocksAsShardGradOp) {
  const std::string kMoe =
      " --model.block_type=moe --model.moe_num_experts=4 --model.moe_top_k=2 --model.moe_zloss_weight=0.001";
  const std::string kFull = "--distributed_strategy=fsdp --fsdp.sharding_strategy=FULL_SHARD";
  auto zero2_moe = fresh_dir("sharded_moe", "zero2"), full_moe = fresh_dir("sharded_moe", "full"),
       zero2 = fresh_dir("sharded_partial", "zero2"), partial = fresh_dir("sharded_partial", "full");
  ASSERT_EQ(zero2_torchrun(zero2_moe, kZero2 + kMoe), 0) << read_all(zero2_moe.string() + ".log");
  ASSERT_EQ(zero2_torchrun(full_moe, kFull + kMoe), 0) << read_all(full_moe.string() + ".log");
  ASSERT_EQ(zero2_torchrun(zero2, kZero2), 0) << read_all(zero2.string() + ".log");
  ASSERT_EQ(zero2_torchrun(partial, kFull + " --activation_checkpointing=one_in_two"), 0)
      << read_all(partial.string() + ".log");
  expect_zero2_losses_near(zero2_moe, full_moe, 20);
  expect_zero2_losses_near(zero2, partial, 20);
  for (const char* key : {"moe_lbl_loss", "moe_z_loss"}) {
    auto a = step_values(zero2_moe, key), b = step_values(full_moe, key);
    ASSERT_EQ(a.size(), b.size()) << key;
    ASSERT_FALSE(a.empty()) << key;
    for (auto& [step, v] : a)
      EXPECT_NEAR(std::stod(v), std::stod(b.at(step)), 1e-5) << key << " step " << step;
  }
  for (const auto& [sharded, whole] : {std::pair{full_moe, zero2_moe}, std::pair{partial, zero2}}) {
    const auto held = zero2_held_bytes(sharded), replica = zero2_held_bytes(whole);
    ASSERT_EQ(held.size(), 3u) << read_all(sharded.string() + ".log");
    ASSERT_EQ(replica.size(), 3u) << read_all(whole.string() + ".log");
    EXPECT_LT(held[0], replica[0]) << sharded;
  }
}

}  // namespace
