// Activation checkpointing per block: the same loss and gradients as without it (dropout
// included: the recomputation replays the random stream; MoE blocks' auxiliary losses
// included: counted once, with their router gradients), and an autograd graph that really
// holds fewer activations.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unordered_set>

#include "siamese/model/moe_mlp.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

config::ModelConfig config(const std::string& residual, const std::string& checkpointing) {
  config::ModelConfig c = siamese::testing::tiny_model(residual, {32, 4, 4, 61, 64, 16});
  c.rope = true;
  c.layer_norm_type = config::LayerNormType::RMS;
  c.include_bias = false;
  c.attention_dropout = c.residual_dropout = c.embedding_dropout = 0.1;
  c.activation_checkpointing = *config::enum_named<config::ActivationCheckpointing>(checkpointing);
  return c;
}

struct LossAndGrads {
  torch::Tensor loss, aux;
  std::vector<torch::Tensor> grads;
  size_t graph_nodes = 0;
};

size_t count_nodes(const torch::autograd::Node* root) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<const torch::autograd::Node*> todo{root};
  while (!todo.empty()) {
    auto* n = todo.back();
    todo.pop_back();
    if (!n || !seen.insert(n).second) continue;
    for (const auto& e : n->next_edges()) todo.push_back(e.function.get());
  }
  return seen.size();
}

// The training loss: cross-entropy plus, for MoE blocks, the auxiliary losses at weights
// that make their gradients count against the cross-entropy's (attached to the blocks'
// outputs, aux_loss.h).
LossAndGrads run(config::ModelConfig cfg) {
  cfg.moe_loss_weight = 0.5;
  cfg.moe_zloss_weight = 0.1;
  torch::manual_seed(5);
  Transformer m(cfg);
  m->train();
  torch::manual_seed(9);
  auto ids = torch::randint(0, cfg.vocab_size, {3, cfg.max_sequence_length});
  torch::manual_seed(21);  // the dropout masks
  AuxLosses aux{torch::ones({})};
  ForwardOptions opts;
  opts.aux = &aux;
  auto logits = m->forward(ids, opts);
  LossAndGrads r;
  r.loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), ids.reshape({-1}));
  if (cfg.is_moe()) r.aux = aux.values[kMoeLoadBalancingLoss] + aux.values[kMoeZLoss];
  r.graph_nodes = count_nodes(r.loss.grad_fn().get());
  r.loss.backward();
  for (auto& p : m->parameters()) r.grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  return r;
}

config::ModelConfig moe(config::ModelConfig c) {
  c.block_type = config::BlockType::Moe;
  c.moe_num_experts = 4;
  c.moe_top_k = 2;
  return c;
}

void expect_checkpointing_keeps_loss_and_gradients(const std::string& topology, bool sparse = false) {
  auto configured = [&](const std::string& setting) {
    return sparse ? moe(config(topology, setting)) : config(topology, setting);
  };
  const LossAndGrads plain = run(configured(""));
  for (const std::string setting : {"whole_layer", "one_in_two"}) {
    const LossAndGrads ckpt = run(configured(setting));
    ASSERT_TRUE(torch::equal(plain.loss, ckpt.loss)) << topology << " " << setting;
    if (sparse) {
      ASSERT_TRUE(torch::equal(plain.aux, ckpt.aux)) << topology << " " << setting;
    }
    ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i)
      EXPECT_TRUE(torch::allclose(plain.grads[i], ckpt.grads[i], 1e-5, 1e-7))
          << topology << " " << setting << " parameter " << i << ": max diff "
          << (plain.grads[i] - ckpt.grads[i]).abs().max().item<double>();
  }
}

TEST(ActivationCheckpoint, SameLossAndGradientsWithDropoutForEveryTopology) {
  for (const auto& topology : topology_names()) expect_checkpointing_keeps_loss_and_gradients(topology);
}

TEST(ActivationCheckpoint, SameLossAndGradientsWithDropoutForEverySiameseCoupling) {
  for (const auto& topology : siamese::testing::kSiameseCouplings)
    expect_checkpointing_keeps_loss_and_gradients(topology);
}

TEST(ActivationCheckpoint, SameLossAndGradientsWithMoeBlocks) {
  for (const std::string topology : {"pre", "hybrid_pre", "post", "hc"})
    expect_checkpointing_keeps_loss_and_gradients(topology, /*sparse=*/true);
}

// The auxiliary losses reach the router through the recomputation: its gradient from them
// alone (the cross-entropy's left out) is the one the plain model gets, counted once.
TEST(ActivationCheckpoint, MoeAuxiliaryLossesBackPropagateThroughTheRecomputedRouter) {
  auto router_grads = [](const std::string& setting) {
    auto cfg = moe(config("pre", setting));
    cfg.attention_dropout = cfg.residual_dropout = cfg.embedding_dropout = 0.0;
    cfg.moe_loss_weight = 1.0;
    cfg.moe_zloss_weight = 1.0;
    torch::manual_seed(5);
    Transformer m(cfg);
    m->train();
    torch::manual_seed(9);
    AuxLosses aux{torch::ones({})};
    ForwardOptions opts;
    opts.aux = &aux;
    // A zero gradient into the logits: only the attached losses reach the router.
    (m->forward(torch::randint(0, cfg.vocab_size, {3, cfg.max_sequence_length}), opts).sum() * 0).backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : m->named_parameters())
      if (p.key().find("router") != std::string::npos) grads.push_back(p.value().grad());
    return std::pair{aux.values[kMoeLoadBalancingLoss] + aux.values[kMoeZLoss], grads};
  };
  const auto [plain_loss, plain] = router_grads("");
  const auto [ckpt_loss, ckpt] = router_grads("whole_layer");
  EXPECT_TRUE(torch::equal(plain_loss, ckpt_loss));
  ASSERT_EQ(plain.size(), 4u);
  ASSERT_EQ(ckpt.size(), 4u);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(ckpt[i].defined()) << "router " << i << " got no gradient";
    EXPECT_GT(plain[i].abs().max().item<double>(), 0.0);
    EXPECT_TRUE(torch::allclose(plain[i], ckpt[i], 1e-5, 1e-8)) << "router " << i;
  }
}

TEST(ActivationCheckpoint, CheckpointedBlocksKeepNoActivationsInTheGraph) {
  const size_t plain = run(config("hybrid_pre", "")).graph_nodes;
  const size_t half = run(config("hybrid_pre", "one_in_two")).graph_nodes;
  const size_t whole = run(config("hybrid_pre", "whole_layer")).graph_nodes;
  // Each checkpointed block collapses to one recompute node.
  EXPECT_LT(whole, half);
  EXPECT_LT(half, plain);
  EXPECT_LT(whole * 4, plain) << plain << " nodes without, " << whole << " with whole_layer";
}

TEST(ActivationCheckpoint, EvaluationAndNoGradRunsAreUnaffected) {
  auto cfg = config("pre", "whole_layer");
  torch::manual_seed(5);
  Transformer m(cfg);
  m->eval();
  auto ids = torch::randint(0, cfg.vocab_size, {2, 8});
  auto a = m->forward(ids);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(a.detach(), m->forward(ids)));
}

}  // namespace
}  // namespace siamese::model
