// cuda_graphs on the CPU: when the rule lets a run graph its micro-batches and what it names
// when it does not, the in-place gradient zeroing a graph relies on, and a CPU
// run asked for graphs training exactly as without. The capture itself runs on the GPU
// (GpuTrainStep.CudaGraph*, tests/train/gpu_test.cpp).
#include <gtest/gtest.h>

#include <string>

#include "siamese/config/sections.h"
#include "siamese/model/lm_loss.h"
#include "siamese/train/micro_batch_graph.h"
#include "siamese/train/setup.h"
#include "siamese/train/train_step.h"
#include "support/tiny_configs.h"

using namespace siamese;

namespace {

const torch::Device kCuda(torch::kCUDA, 0);

config::StepSection dense() {
  config::StepSection s;
  s.cuda_graphs = true;
  return s;
}

TEST(CudaGraphRule, AllowsOneDenseRankWithoutDropoutOnCuda) {
  EXPECT_EQ(train::cuda_graph_refusal(dense(), kCuda, 1, false), std::nullopt);
  auto fp16 = dense();
  fp16.precision = config::Precision::AmpFp16;  // the loss scale changes in place
  EXPECT_EQ(train::cuda_graph_refusal(fp16, kCuda, 1, false), std::nullopt);
}

TEST(CudaGraphRule, NamesWhatRefusesIt) {
  const auto refusal = [](const config::StepSection& s, torch::Device d = kCuda, int ranks = 1,
                          bool gathers = false) {
    return train::cuda_graph_refusal(s, d, ranks, gathers).value_or("");
  };
  EXPECT_NE(refusal(dense(), torch::kCPU).find("CUDA device (device: cpu)"), std::string::npos);
  EXPECT_NE(refusal(dense(), kCuda, 2).find("2 ranks"), std::string::npos);
  EXPECT_NE(refusal(dense(), kCuda, 1, true).find("sharded strategy"), std::string::npos);
  auto moe = dense();
  moe.moe = true;
  EXPECT_NE(refusal(moe).find("MoE"), std::string::npos);
  auto checkpointed = dense();
  checkpointed.activation_checkpointing = config::ActivationCheckpointing::WholeLayer;
  EXPECT_NE(refusal(checkpointed).find("activation checkpointing"), std::string::npos);
  auto documents = dense();
  documents.generate_doc_lengths = true;
  EXPECT_NE(refusal(documents).find("data.generate_doc_lengths"), std::string::npos);
  auto dropout = dense();
  dropout.dropout = true;
  EXPECT_NE(refusal(dropout).find("dropout"), std::string::npos);
}

TEST(CudaGraphRule, StepSectionSeesEveryDropoutAndTheBlockType) {
  auto c = siamese::testing::tiny("unused");
  c.model.attention_dropout = c.model.residual_dropout = c.model.embedding_dropout = 0.0;
  EXPECT_FALSE(config::step_section(c).dropout);
  for (double config::ModelConfig::*d :
       {&config::ModelConfig::attention_dropout, &config::ModelConfig::residual_dropout,
        &config::ModelConfig::embedding_dropout}) {
    auto one = c;
    one.model.*d = 0.05;
    EXPECT_TRUE(config::step_section(one).dropout);
  }
  c.model.block_type = config::BlockType::Moe;
  EXPECT_TRUE(config::step_section(c).moe);
}

// A graph accumulates into the gradients' captured addresses.
TEST(CudaGraphState, GradientsZeroWhereTheyAre) {
  auto c = siamese::testing::tiny("unused");
  dist::ParallelPlan plan;
  train::Trainee t = train::build_trainee(c, torch::kCPU, plan);
  torch::manual_seed(3);
  const auto ids = torch::randint(0, c.model.vocab_size, {2, c.model.max_sequence_length});
  model::lm_loss_sum(*t.model, ids).backward();
  std::vector<std::pair<torch::Tensor, const void*>> grads;
  for (const auto& p : t.optim->params())
    if (p.grad().defined()) grads.emplace_back(p, p.grad().data_ptr());
  ASSERT_FALSE(grads.empty());
  t.optim->zero_grad_in_place();
  for (const auto& [p, at] : grads) {
    EXPECT_EQ(p.grad().data_ptr(), at);
    EXPECT_EQ(p.grad().abs().max().item<double>(), 0.0);
  }
}

// On the CPU the rule refuses graphs: the step runs as without them, bit for bit.
TEST(CudaGraphState, CpuRunAskingForGraphsTrainsAsWithout) {
  auto c = siamese::testing::tiny("unused");
  c.model.attention_dropout = c.model.residual_dropout = c.model.embedding_dropout = 0.0;
  torch::manual_seed(9);
  const auto batch =
      torch::randint(0, c.model.vocab_size, {c.global_train_batch_size, c.model.max_sequence_length});
  std::vector<double> losses[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    c.cuda_graphs = graphs == 1;
    dist::ParallelPlan plan;
    train::Trainee t = train::build_trainee(c, torch::kCPU, plan);
    train::TrainStep step = t.step(config::step_section(c), plan, torch::kCPU);
    for (int i = 0; i < 3; ++i) losses[graphs].push_back(step.run(batch, 1e-3).values["loss"].item<double>());
    EXPECT_EQ(step.graph_replays(), 0);
  }
  EXPECT_EQ(losses[0], losses[1]);
}

}  // namespace
