// The fused AdamW against LibTorch's per-parameter AdamW (to rounding; bit for bit against
// torch.optim.AdamW(fused=True) in muon_test.cpp), its device-side skip, the sync-free
// gradient clipping, and the CUDA kernel against the CPU one (on a GPU).
#include <gtest/gtest.h>

#include <algorithm>

#include "siamese/model/transformer.h"
#include "siamese/train/optimizer.h"

using namespace siamese;

namespace {

// Two groups (decayed, not decayed) of a few odd-shaped parameters with fixed gradients.
struct Problem {
  std::vector<torch::Tensor> decay, no_decay;

  explicit Problem(torch::Device device = torch::kCPU) {
    torch::manual_seed(11);
    for (auto shape : {std::vector<int64_t>{7, 5}, {33}, {3, 4, 2}})
      decay.push_back(torch::randn(shape).to(device).requires_grad_());
    for (auto shape : {std::vector<int64_t>{5}, {1}})
      no_decay.push_back(torch::randn(shape).to(device).requires_grad_());
  }
  std::vector<torch::Tensor> all() const {
    auto v = decay;
    v.insert(v.end(), no_decay.begin(), no_decay.end());
    return v;
  }
  void set_grads(int step) {
    torch::manual_seed(100 + step);
    for (auto& p : all()) p.mutable_grad() = torch::randn(p.sizes()).to(p.device()) * (step + 1);
  }
  template <class Opt>
  std::unique_ptr<Opt> optimizer() const {
    auto o = [](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(3e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, o(0.1));
    groups.emplace_back(no_decay, o(0.0));
    return std::make_unique<Opt>(std::move(groups), torch::optim::AdamWOptions(3e-2));
  }
};

TEST(Optimizer, FusedAdamWMatchesLibTorchAdamWToRounding) {
  Problem ours, reference;
  auto a = ours.optimizer<train::AdamW>();
  auto b = reference.optimizer<torch::optim::AdamW>();
  for (int step = 0; step < 6; ++step) {
    ours.set_grads(step);
    reference.set_grads(step);
    train::set_learning_rate(*a, 3e-2 / (step + 1));  // a schedule, as in training
    train::set_learning_rate(*b, 3e-2 / (step + 1));
    a->update();
    b->step();
    for (size_t i = 0; i < ours.all().size(); ++i) {
      const double gap = (ours.all()[i] - reference.all()[i]).abs().max().item<double>();
      ASSERT_LE(gap, 1e-6 * reference.all()[i].abs().max().item<double>())
          << "step " << step << " param " << i;
    }
  }
  EXPECT_EQ(a->state_of(ours.decay[0]).step_count.item<double>(), 6.0);
}

TEST(Optimizer, SkipFlagCancelsTheWholeUpdateIncludingStepCounts) {
  Problem skipped, plain;
  auto a = skipped.optimizer<train::AdamW>();
  auto b = plain.optimizer<train::AdamW>();
  for (int step = 0; step < 4; ++step) {
    skipped.set_grads(step);
    a->update(torch::zeros({}));
    if (step == 1) {  // a bad step: nothing may change
      skipped.set_grads(99);
      a->update(torch::ones({}));
    }
    plain.set_grads(step);
    b->update();
  }
  for (size_t i = 0; i < plain.all().size(); ++i) {
    EXPECT_TRUE(torch::equal(skipped.all()[i], plain.all()[i])) << "param " << i;
    EXPECT_EQ(a->state_of(skipped.all()[i]).step_count.item<double>(), 4.0);
  }
}

TEST(Optimizer, ClipGradNormMatchesLibTorchWithoutReadingTheNorm) {
  for (double max_norm : {0.5, 1e9, std::numeric_limits<double>::infinity()}) {
    Problem ours, reference;
    ours.set_grads(3);
    reference.set_grads(3);
    const torch::Tensor norm = train::clip_grad_norm(ours.all(), max_norm);
    EXPECT_EQ(norm.dim(), 0);
    const double expected = torch::nn::utils::clip_grad_norm_(reference.all(), max_norm);
    EXPECT_DOUBLE_EQ(norm.item<double>(), expected);
    for (size_t i = 0; i < ours.all().size(); ++i)
      EXPECT_TRUE(torch::allclose(ours.all()[i].grad(), reference.all()[i].grad(), 1e-6, 0))
          << "max_norm " << max_norm;
  }
}

TEST(GpuOptimizer, FusedCudaAdamWMatchesTheCpuPathAndSkipsOnTheDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the fused kernel runs on a GPU only";
  Problem gpu(torch::kCUDA), cpu;
  auto a = gpu.optimizer<train::AdamW>();
  auto b = cpu.optimizer<train::AdamW>();
  for (int step = 0; step < 6; ++step) {
    gpu.set_grads(step);
    cpu.set_grads(step);
    a->update(torch::zeros({}, torch::kCUDA));
    b->update();
    if (step == 2) {
      gpu.set_grads(50);
      a->update(torch::ones({}, torch::kCUDA));
    }
  }
  for (size_t i = 0; i < cpu.all().size(); ++i) {
    EXPECT_TRUE(torch::allclose(gpu.all()[i].cpu(), cpu.all()[i], 1e-5, 1e-6)) << "param " << i;
    EXPECT_EQ(a->state_of(gpu.all()[i]).step_count.item<double>(), 6.0);
  }
}

}  // namespace

TEST(Optimizer, OlmoParamGroups) {
  config::ModelConfig c;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_layers = 1;
  c.vocab_size = c.embedding_size = 64;
  c.max_sequence_length = 8;
  model::Transformer m(c);
  config::OptimizerConfig oc;
  auto g = train::param_groups(oc, m->named_parameters());
  for (const auto& n : g.names("decay")) EXPECT_NE(n.find("weight"), std::string::npos) << n;
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  EXPECT_TRUE(has(g.names("no_decay"), "wte.weight"));
  EXPECT_TRUE(has(g.names("decay"), "blocks.0.attn.att_proj.weight"));
  EXPECT_TRUE(has(g.names("decay"), "blocks.0.mlp.ff_out.weight"));
  oc.decay_embeddings = true;
  EXPECT_TRUE(has(train::param_groups(oc, m->named_parameters()).names("decay"), "wte.weight"));
  oc.decay_norm_and_bias = true;
  auto all = train::param_groups(oc, m->named_parameters());
  EXPECT_TRUE(all.names("no_decay").empty());
  auto opt = train::build_optimizer(config::OptimizerConfig{}, m->named_parameters());
  ASSERT_EQ(opt->adamw().param_groups().size(), 2u);
  EXPECT_EQ(static_cast<torch::optim::AdamWOptions&>(opt->adamw().param_groups()[1].options()).weight_decay(),
            0.0);
  EXPECT_EQ(opt->muon(), nullptr);
}
