// The CUDA paths on a GPU (ctest label `gpu`; each test skips without a CUDA device):
// CUDA vs CPU parity of every topology and of the MoE block in fp32, bf16 and fp16 autocast
// training against fp32, MoE's grouped GEMM under bf16, activation checkpointing with the chunked loss, the
// NCCL process group and fsdp FULL_SHARD over it on one rank, bit-exact resume of a checkpoint saved on the
// GPU, the attention kernels chosen, and micro-batches replayed as CUDA graphs. scripts/gpu_check.sh
// runs them.
#include <ATen/SDPBackend.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "siamese/common/autocast.h"
#include "siamese/dist/communicator.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/mlp.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "siamese/train/attention_kernels.h"
#include "siamese/train/parallelize.h"
#include "siamese/train/setup.h"
#include "siamese/train/trainer.h"
#include "support/autograd_graph.h"
#include "support/free_port.h"
#include "support/run_files.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

using siamese::testing::fresh_dir;

namespace fs = std::filesystem;
using namespace siamese;
using siamese::testing::losses;

namespace {

#define REQUIRE_GPU()               \
  if (!torch::cuda::is_available()) \
  GTEST_SKIP() << "no CUDA device: GPU tests run on the GPU machine (scripts/gpu_check.sh)"

config::ModelConfig small_model(const std::string& residual) {
  config::ModelConfig c = siamese::testing::tiny_model(residual, {64, 4, 3, 100, 128, 32});
  c.rope = true;
  c.layer_norm_type = config::LayerNormType::RMS;
  c.include_bias = false;
  return c;
}

// siamese::testing::tiny on the GPU, without dropout unless a test turns it on.
config::TrainConfig gpu_run(const fs::path& folder) {
  config::TrainConfig c = siamese::testing::tiny(folder);
  c.model.attention_dropout = c.model.residual_dropout = 0.0;
  c.global_train_batch_size = 8;
  c.device_train_microbatch_size = 4;
  c.max_duration = "20";
  c.console_log_interval = 5;
  c.device = "cuda";
  c.allow_tf32 = false;
  return c;
}

// One model built twice from the same seed, on the CPU and on CUDA, in float32 without
// TF32: logits within 1e-4, every parameter's gradient within 1e-4 of its largest entry.
void expect_cuda_matches_cpu(const config::ModelConfig& cfg, const std::string& label) {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  torch::manual_seed(3);
  model::Transformer cpu(cfg);
  torch::manual_seed(3);
  model::Transformer gpu(cfg);
  gpu->to(torch::kCUDA);
  torch::manual_seed(4);
  auto ids = torch::randint(0, cfg.vocab_size, {4, cfg.max_sequence_length});
  model::lm_loss_sum(*cpu, ids).backward();
  model::lm_loss_sum(*gpu, ids.to(torch::kCUDA)).backward();
  auto logits_cpu = cpu->forward(ids), logits_gpu = gpu->forward(ids.to(torch::kCUDA)).cpu();
  EXPECT_LT((logits_cpu - logits_gpu).abs().max().item<double>(), 1e-4) << label;
  const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
  for (const auto& kv : pc) {
    ASSERT_EQ(kv.value().grad().defined(), pg[kv.key()].grad().defined()) << label << " " << kv.key();
    if (!kv.value().grad().defined()) continue;
    auto g = pg[kv.key()].grad().cpu(), c = kv.value().grad();
    EXPECT_LT((g - c).abs().max().item<double>(), 1e-4 * std::max(1.0, c.abs().max().item<double>()))
        << label << " " << kv.key();
  }
}

TEST(GpuParity, EveryTopologyOnCudaMatchesCpuInFloat32) {
  REQUIRE_GPU();
  for (const auto& topology : model::topology_names())
    expect_cuda_matches_cpu(small_model(topology), topology);
}

// The attention's one-pass head preparation (kernels/qkv_heads.h) runs where per-head norms
// have no weights, as OLMo-1B's configs give them, and with RoPE alone: pre, and hybrid_pre
// with RMSNorm and LayerNorm, on CUDA against the CPU's separate norms and rotation. Heads of
// 32 channels, the smallest the kernel takes.
TEST(GpuParity, HeadPreparationWithoutNormWeightsMatchesTheCpu) {
  REQUIRE_GPU();
  for (const std::string topology : {"pre", "hybrid_pre"})
    for (const auto norm : {config::LayerNormType::RMS, config::LayerNormType::Default}) {
      auto cfg = siamese::testing::tiny_model(topology, {64, 2, 3, 100, 128, 32});
      cfg.rope = true;
      cfg.include_bias = false;
      cfg.layer_norm_type = norm;
      cfg.layer_norm_with_affine = cfg.attention_layer_norm_with_affine = false;
      expect_cuda_matches_cpu(cfg, topology + (norm == config::LayerNormType::RMS ? " rms" : " layer_norm"));
    }
}

std::vector<double> loss_values(const fs::path& folder) {
  std::vector<double> out;
  for (const auto& [step, loss] : losses(folder)) out.push_back(std::stod(loss));
  return out;
}

void expect_same_losses(const config::TrainConfig& a, const config::TrainConfig& b, double tolerance) {
  const auto la = loss_values(a.save_folder), lb = loss_values(b.save_folder);
  ASSERT_EQ(la.size(), 20u);
  ASSERT_EQ(lb.size(), la.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(lb[i], la[i], tolerance * la[i]) << "step " << i + 1;
}

// Autocast in bf16, and in fp16 with its dynamic loss scale (the scaler unscales and finds no
// overflow at the default scale on this model), trains within 2% of float32 at each of 20
// steps, and not exactly as float32 (the half dtype really ran).
void expect_autocast_within_two_percent(const std::string& precision) {
  auto fp32 = gpu_run(fresh_dir("gpu_test", precision + "_ref")),
       half = gpu_run(fresh_dir("gpu_test", precision));
  half.precision = *config::enum_named<config::Precision>(precision);
  ASSERT_EQ(train::train(fp32), 0);
  ASSERT_EQ(train::train(half), 0);
  expect_same_losses(fp32, half, 2e-2);
  EXPECT_NE(loss_values(fp32.save_folder), loss_values(half.save_folder));
}

TEST(GpuTrainer, AmpBf16StaysWithinTwoPercentOfFloat32Over20Steps) {
  REQUIRE_GPU();
  expect_autocast_within_two_percent("amp_bf16");
}

TEST(GpuTrainer, AmpFp16WithLossScalingStaysWithinTwoPercentOfFloat32) {
  REQUIRE_GPU();
  expect_autocast_within_two_percent("amp_fp16");
}

TEST(GpuTrainer, CheckpointSavedOnTheGpuResumesBitExact) {
  REQUIRE_GPU();
  auto whole = gpu_run(fresh_dir("gpu_test", "whole")), parts = gpu_run(fresh_dir("gpu_test", "parts"));
  whole.max_duration = parts.max_duration = "8";
  whole.model.attention_dropout = parts.model.attention_dropout = 0.1;  // the CUDA RNG too
  whole.model.residual_dropout = parts.model.residual_dropout = 0.1;
  ASSERT_EQ(train::train(whole), 0);
  train::RunControl stop;
  stop.stop_at = 3;
  ASSERT_EQ(train::train(parts, stop), 0);
  ASSERT_EQ(train::train(parts), 0);
  EXPECT_EQ(losses(whole.save_folder), losses(parts.save_folder));
}

TEST(GpuDist, NcclProcessGroupOnOneRankAllReduces) {
  REQUIRE_GPU();
  dist::World world;
  world.master_port = siamese::testing::free_port();
  dist::Communicator comm(world, torch::Device(torch::kCUDA, 0), std::chrono::seconds(60));
  auto t = torch::arange(10, torch::dtype(torch::kFloat).device(torch::kCUDA));
  comm.all_reduce_sum(t);
  EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(10, torch::kFloat)));
  EXPECT_EQ(comm.all_reduce_sum(2.5), 2.5);
  comm.barrier();
}

// The shapes and dtype the attention sublayer hands to at::scaled_dot_product_attention under
// amp_bf16: [B, H, T, head_dim] with OLMo-1B's head size 128, causal. With model.flash_attention
// (the trainer's AttentionKernelScope) the flash kernel runs; without it LibTorch picks among
// its fused kernels (cuDNN's on an H100 with torch 2.11), never the unfused math path.
TEST(GpuAttention, FlashKernelIsChosenForTheModelsBf16Attention) {
  REQUIRE_GPU();
  auto opts = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  auto q = torch::randn({2, 16, 256, 128}, opts), k = torch::randn({2, 16, 256, 128}, opts),
       v = torch::randn({2, 16, 256, 128}, opts);
  auto choose = [&] {
    return static_cast<at::SDPBackend>(
        at::_fused_sdp_choice(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true));
  };
  const auto any = choose();
  EXPECT_NE(any, at::SDPBackend::math) << "backend " << static_cast<int>(any);
  EXPECT_NE(any, at::SDPBackend::error);
  const train::AttentionKernelScope flash_only(true);
  const auto flash = choose();
  EXPECT_EQ(flash, at::SDPBackend::flash_attention) << "backend " << static_cast<int>(flash);
}

// The sparse feed-forward (block_type moe: router, top-k dispatch, experts, auxiliary
// losses) on CUDA computes the CPU's loss and gradients in float32.
TEST(GpuParity, MoeOnCudaMatchesCpuInFloat32) {
  REQUIRE_GPU();
  for (const std::string topology : {"pre", "hybrid_pre"}) {
    config::ModelConfig cfg = small_model(topology);
    cfg.block_type = config::BlockType::Moe;
    cfg.moe_num_experts = 4;
    cfg.moe_top_k = 2;
    expect_cuda_matches_cpu(cfg, topology + " moe");
  }
}

// Under bf16 autocast on CUDA the experts run as LibTorch's grouped GEMM (mlp.h) and give the
// float32 per-expert loop's output and gradients on the CPU to bf16's precision.
TEST(GpuParity, MoeGroupedGemmUnderBf16MatchesTheFloat32Loop) {
  REQUIRE_GPU();
  config::ModelConfig cfg = small_model("pre");
  cfg.block_type = config::BlockType::Moe;
  cfg.moe_num_experts = 8;
  cfg.moe_top_k = 2;
  torch::manual_seed(9);
  model::Mlp cpu(cfg);
  {
    torch::NoGradGuard g;
    for (auto& p : cpu->parameters()) p.normal_(0.0, 0.3);
  }
  model::Mlp gpu(cfg);
  {
    torch::NoGradGuard g;
    const auto from = cpu->named_parameters();
    for (auto& p : gpu->named_parameters()) p.value().copy_(from[p.key()]);
  }
  gpu->to(torch::kCUDA);
  const auto x = torch::randn({4, 32, cfg.d_model}), grad = torch::randn({4, 32, cfg.d_model});
  const auto xc = x.clone().requires_grad_(), xg = x.to(torch::kCUDA).requires_grad_();
  auto want = cpu(xc);
  (want * grad).sum().backward();
  torch::Tensor got;
  {
    AutocastGuard amp(torch::kCUDA, torch::kBFloat16);
    got = gpu(xg);
  }
  EXPECT_TRUE(siamese::testing::graph_has_node(got, "GroupedMmBackward0"));
  (got.to(torch::kFloat) * grad.to(torch::kCUDA)).sum().backward();
  auto close = [](const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
    const double scale = b.abs().max().item<double>();
    EXPECT_LT((a.cpu().to(torch::kFloat) - b).abs().max().item<double>(), 3e-2 * scale) << what;
  };
  close(got, want, "output");
  close(xg.grad(), xc.grad(), "input gradient");
  const auto from = cpu->named_parameters();
  for (const auto& p : gpu->named_parameters()) close(p.value().grad(), from[p.key()].grad(), p.key());
}

// Every block recomputed in backward and the LM head + loss over chunks of tokens train, on
// the GPU, the run that keeps all activations and logits (to float32 rounding: the
// recomputation and the chunks sum in another order).
TEST(GpuTrainer, CheckpointedChunkedRunTrainsAsThePlainRun) {
  REQUIRE_GPU();
  auto plain = gpu_run(fresh_dir("gpu_test", "plain")), lean = gpu_run(fresh_dir("gpu_test", "lean"));
  plain.model.residual = lean.model.residual = "hybrid_pre";
  lean.model.activation_checkpointing = config::ActivationCheckpointing::WholeLayer;
  lean.model.fused_loss = true;
  lean.model.fused_loss_chunk_tokens = 48;
  ASSERT_EQ(train::train(plain), 0);
  ASSERT_EQ(train::train(lean), 0);
  expect_same_losses(plain, lean, 1e-5);
}

// fsdp FULL_SHARD over the NCCL process group on one rank: the gathers, reduce-scatters,
// sharded clipping and sharded AdamW run on the GPU and train the one-process model.
TEST(GpuDist, FullShardOnOneNcclRankTrainsAsOneProcess) {
  REQUIRE_GPU();
  auto one = gpu_run(fresh_dir("gpu_test", "fsdp_ref")), sharded = gpu_run(fresh_dir("gpu_test", "fsdp"));
  sharded.distributed_strategy = config::DistributedStrategy::Fsdp;
  sharded.fsdp.sharding_strategy = config::ShardingStrategy::FullShard;
  dist::World world;
  world.master_port = siamese::testing::free_port();
  dist::ParallelPlan plan = train::make_plan(sharded, world);
  train::RunControl control;
  control.plan = &plan;
  ASSERT_EQ(train::train(one), 0);
  ASSERT_EQ(train::train(sharded, control), 0);
  expect_same_losses(one, sharded, 1e-5);
}

// cuda_graphs against the eager step, from one seed on the same batches: one step's loss, z-loss
// and gradient norm at each of 5 steps, and every parameter after them. A replay runs the
// captured kernels on the same inputs, so only cuBLAS choosing another algorithm on the side
// stream could part them; 1e-6 relative bounds that in float32 (a few roundings of sums of
// ~1e2 terms), and the half types' rounding of the same products. Global 10 in micro-batches of
// 4: every step's last micro-batch, of 2, runs eagerly; the first step's two full ones and the
// second step's first warm up, its second is captured and replayed, and every later one replays.
// After the third step both models run a forward at the full sequence length.
void expect_graphed_steps_match_eager(config::TrainConfig c, const std::string& label) {
  c.global_train_batch_size = 10;
  c.device_train_microbatch_size = 4;
  c.softmax_auxiliary_loss = true;
  const torch::Device cuda(torch::kCUDA);
  dist::ParallelPlan plan_eager, plan_graphed;
  c.cuda_graphs = false;
  train::Trainee eager = train::build_trainee(c, cuda, plan_eager);
  train::TrainStep eager_step = eager.step(config::step_section(c), plan_eager, cuda);
  c.cuda_graphs = true;
  train::Trainee graphed = train::build_trainee(c, cuda, plan_graphed);
  train::TrainStep graphed_step = graphed.step(config::step_section(c), plan_graphed, cuda);
  torch::manual_seed(11);
  for (int step = 0; step < 5; ++step) {
    const auto batch =
        torch::randint(0, c.model.vocab_size, {c.global_train_batch_size, c.model.max_sequence_length},
                       torch::dtype(torch::kLong).device(cuda));
    const auto a = eager_step.run(batch, 1e-3), b = graphed_step.run(batch, 1e-3);
    for (const std::string name : {"loss", "z_loss"}) {
      const double x = a.values[name].item<double>(), y = b.values[name].item<double>();
      EXPECT_NEAR(y, x, 1e-6 * std::abs(x)) << label << " " << name << " at step " << step + 1;
    }
    const double ga = a.grad_norm.item<double>(), gb = b.grad_norm.item<double>();
    EXPECT_NEAR(gb, ga, 1e-6 * ga) << label << " grad norm at step " << step + 1;
    if (step == 2) {
      // A forward at the full length, as an evaluation runs between steps: RoPE's longer tables
      // must not free the ones the graph reads.
      torch::NoGradGuard no_grad;
      const auto full = batch.narrow(0, 0, 2);
      EXPECT_TRUE(torch::equal(eager.model->forward(full), graphed.model->forward(full))) << label;
    }
  }
  EXPECT_EQ(graphed_step.graph_replays(), 7) << label;
  const auto pa = eager.model->named_parameters(), pb = graphed.model->named_parameters();
  for (const auto& kv : pa) {
    const auto scale = kv.value().abs().max().item<double>();
    EXPECT_LE((kv.value() - pb[kv.key()]).abs().max().item<double>(), 1e-6 * std::max(scale, 1e-3))
        << label << " " << kv.key();
  }
}

TEST(GpuTrainStep, CudaGraphReplaysTrainAsTheEagerStepForEveryTopology) {
  REQUIRE_GPU();
  at::globalContext().setAllowTF32CuBLAS(false);
  for (const auto& topology : model::topology_names()) {
    auto c = gpu_run(fresh_dir("gpu_test", "graphs_" + topology));
    c.model = small_model(topology);
    expect_graphed_steps_match_eager(c, topology);
  }
}

// Autocast's casts happen inside the graph; fp16's loss scale is read at the address the graph
// captured, so its in-place update reaches the replays.
TEST(GpuTrainStep, CudaGraphReplaysTrainAsTheEagerStepUnderAutocast) {
  REQUIRE_GPU();
  for (const std::string precision : {"amp_bf16", "amp_fp16"})
    for (const std::string topology : {"pre", "siamese"}) {
      auto c = gpu_run(fresh_dir("gpu_test", "graphs_" + precision + topology));
      c.model = small_model(topology);
      c.precision = *config::enum_named<config::Precision>(precision);
      c.fp16_loss_scale_growth_interval = 2;  // the scale doubles between replays
      expect_graphed_steps_match_eager(c, precision + " " + topology);
    }
}

}  // namespace
