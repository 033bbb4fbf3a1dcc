// The CUDA paths on a GPU (ctest label `gpu`; each test skips without a CUDA device):
// CUDA vs CPU parity of every topology in fp32, bf16 autocast training against fp32, the
// NCCL process group on one rank, bit-exact resume of a checkpoint saved on the GPU, and
// the flash attention kernel chosen for the model's attention. scripts/gpu_check.sh runs them.
#include <ATen/SDPBackend.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "siamese/dist/communicator.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "siamese/train/trainer.h"
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

ModelConfig small_model(const std::string& residual) {
  ModelConfig c = siamese::testing::tiny_model(residual, {64, 4, 3, 100, 128, 32});
  c.rope = true;
  c.layer_norm_type = "rms";
  c.include_bias = false;
  return c;
}

// siamese::testing::tiny on the GPU, without dropout unless a test turns it on.
TrainConfig gpu_run(const fs::path& folder) {
  TrainConfig c = siamese::testing::tiny(folder);
  c.model.attention_dropout = c.model.residual_dropout = 0.0;
  c.global_train_batch_size = 8;
  c.device_train_microbatch_size = 4;
  c.max_duration = "20";
  c.console_log_interval = 5;
  c.device = "cuda";
  c.allow_tf32 = false;
  return c;
}

TEST(GpuParity, EveryTopologyOnCudaMatchesCpuInFloat32) {
  REQUIRE_GPU();
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  for (const auto& topology : model::topology_names()) {
    const ModelConfig cfg = small_model(topology);
    torch::manual_seed(3);
    model::Transformer cpu(cfg);
    torch::manual_seed(3);
    model::Transformer gpu(cfg);
    gpu->to(torch::kCUDA);
    torch::manual_seed(4);
    auto ids = torch::randint(0, cfg.vocab_size, {4, cfg.max_sequence_length});
    auto loss_cpu = model::lm_loss_sum(*cpu, ids);
    auto loss_gpu = model::lm_loss_sum(*gpu, ids.to(torch::kCUDA));
    loss_cpu.backward();
    loss_gpu.backward();
    auto logits_cpu = cpu->forward(ids), logits_gpu = gpu->forward(ids.to(torch::kCUDA)).cpu();
    EXPECT_LT((logits_cpu - logits_gpu).abs().max().item<double>(), 1e-4) << topology;
    const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
    for (const auto& kv : pc) {
      auto g = pg[kv.key()].grad().cpu(), c = kv.value().grad();
      EXPECT_LT((g - c).abs().max().item<double>(), 1e-4 * std::max(1.0, c.abs().max().item<double>()))
          << topology << " " << kv.key();
    }
  }
}

TEST(GpuTrainer, AmpBf16StaysWithinTwoPercentOfFloat32Over20Steps) {
  REQUIRE_GPU();
  auto fp32 = gpu_run(fresh_dir("gpu_test", "fp32")), bf16 = gpu_run(fresh_dir("gpu_test", "bf16"));
  bf16.precision = "amp_bf16";
  ASSERT_EQ(train::train(fp32), 0);
  ASSERT_EQ(train::train(bf16), 0);
  auto lf = losses(fp32.save_folder);
  auto lb = losses(bf16.save_folder);
  ASSERT_EQ(lf.size(), 20u);
  ASSERT_EQ(lb.size(), 20u);
  double max_rel = 0;
  for (auto& [step, loss] : lf)
    max_rel = std::max(max_rel, std::abs(std::stod(lb[step]) / std::stod(loss) - 1));
  EXPECT_LT(max_rel, 2e-2);
  EXPECT_GT(max_rel, 0.0);  // autocast really ran in bf16
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
  World world;
  world.master_port = siamese::testing::free_port();
  Communicator comm(world, torch::Device(torch::kCUDA, 0), std::chrono::seconds(60));
  auto t = torch::arange(10, torch::dtype(torch::kFloat).device(torch::kCUDA));
  comm.all_reduce_sum(t);
  EXPECT_TRUE(torch::equal(t.cpu(), torch::arange(10, torch::kFloat)));
  EXPECT_EQ(comm.all_reduce_sum(2.5), 2.5);
  comm.barrier();
}

TEST(GpuAttention, FlashKernelIsChosenForTheModelsBf16Attention) {
  REQUIRE_GPU();
  // The shapes and dtype the attention sublayer hands to at::scaled_dot_product_attention
  // under amp_bf16: [B, H, T, head_dim] with OLMo-1B's head size 128, causal.
  auto opts = torch::dtype(torch::kBFloat16).device(torch::kCUDA);
  auto q = torch::randn({2, 16, 256, 128}, opts), k = torch::randn({2, 16, 256, 128}, opts),
       v = torch::randn({2, 16, 256, 128}, opts);
  const auto choice = static_cast<at::SDPBackend>(
      at::_fused_sdp_choice(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true));
  EXPECT_EQ(choice, at::SDPBackend::flash_attention) << "backend " << static_cast<int>(choice);
}

}  // namespace
