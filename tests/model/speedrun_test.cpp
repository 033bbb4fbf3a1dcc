// The speedrun residual recipe (topology speedrun) against a plain-PyTorch twin written from
// nanochat's GPT (tests/model/speedrun_reference.py): the initial scalars, the head's input and
// every gradient at several depths (the backout block floor(L / 2) moves with L). Central
// differences on the learned scalars of a whole model in float64. With r = 1, a = 0 and b = 0 it
// is Pre-Norm on normalized embeddings exactly, and the backout stream is the mid-depth
// residual, absent when the model runs fewer blocks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "siamese/common/npy.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "support/python_reference.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

constexpr int64_t kWidth = 8;

config::ModelConfig speedrun_config(int64_t n_layers) {
  config::ModelConfig c = siamese::testing::tiny_model("speedrun", {kWidth, 2, n_layers, 61, 64, 32});
  c.layer_norm_type = config::LayerNormType::RMS;
  c.include_bias = false;
  c.rope = true;
  return c;
}

std::string block_name(int64_t l, const std::string& name) {
  return "blocks." + std::to_string(l) + "." + name;
}

// The per-block tensors `name` of `topo` stacked [L, ...]; `grad` for their gradients.
torch::Tensor stacked(TopologyImpl& topo, int64_t n_layers, const std::string& name, bool grad = false) {
  auto params = topo.named_parameters();
  std::vector<torch::Tensor> out;
  for (int64_t l = 0; l < n_layers; ++l) {
    const auto& p = params[block_name(l, name)];
    out.push_back(grad ? p.grad() : p.detach());
  }
  return torch::stack(out);
}

// Scalars away from their init (and from each other), norm weights 1 + 0.5 N(0, 1).
void randomize(TopologyImpl& topo) {
  torch::NoGradGuard g;
  for (auto& p : topo.named_parameters()) {
    auto& v = p.value();
    if (p.key().find("resid_lambda") != std::string::npos)
      v.copy_(1.0 + 0.3 * torch::randn_like(v));
    else if (p.key().find("lambda") != std::string::npos)
      v.copy_(0.5 * torch::randn_like(v));
    else
      v.copy_(1.0 + 0.5 * torch::randn_like(v));
  }
}

// The topology on fixed sublayer maps F_s(h) = tanh(h W_s), as the twin runs them.
torch::Tensor run_topology(TopologyImpl& topo, const torch::Tensor& emb, const torch::Tensor& w) {
  State st = topo.begin(emb);
  for (int64_t s = 0; s < w.size(0); ++s) topo.leave(st, torch::tanh(topo.enter(st, s).matmul(w[s])), s);
  return topo.finish(st);
}

// The twin's numbers to 1e-10 of the scale in float64, where the arithmetic rounds at 1e-16 a
// step through a few dozen steps, and 1e-5 in float32 (1e-7 a step).
TEST(Speedrun, MatchesAPlainPyTorchTwinOfNanochat) {
  struct Case {
    int64_t n_layers;
    torch::ScalarType dtype;
    double tolerance;
  };
  const std::vector<Case> cases = {{1, torch::kDouble, 1e-10},
                                   {2, torch::kDouble, 1e-10},
                                   {4, torch::kDouble, 1e-10},
                                   {5, torch::kDouble, 1e-10},
                                   {4, torch::kFloat, 1e-5}};
  siamese::testing::TempDir dir;
  std::string folders;
  std::vector<siamese::testing::NamedResults> ours, inits;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const std::string folder = siamese::testing::new_case_folder(dir, k, folders);
    const config::ModelConfig cfg = speedrun_config(c.n_layers);
    const int64_t L = c.n_layers;
    torch::manual_seed(70 + k);
    auto topo = make_topology(cfg);
    topo->to(c.dtype);
    inits.push_back({{"init_resid_lambdas", stacked(*topo, L, "resid_lambda").flatten()},
                     {"init_x0_lambdas", stacked(*topo, L, "x0_lambda").flatten()},
                     {"init_backout_lambda", topo->named_parameters()["backout_lambda"].detach().clone()}});
    randomize(*topo);
    const auto opts = torch::TensorOptions().dtype(c.dtype);
    auto emb = (3.0 * torch::randn({2, 5, kWidth}, opts)).requires_grad_();
    auto w = torch::randn({2 * L, kWidth, kWidth}, opts) / std::sqrt(double(kWidth));
    auto out = run_topology(*topo, emb, w);
    auto g = torch::randn_like(out);
    (out * g).sum().backward();
    auto params = topo->named_parameters();
    ours.push_back({{"out", out},
                    {"grad_emb", emb.grad()},
                    {"grad_attn_norm", stacked(*topo, L, "attn_norm.weight", true)},
                    {"grad_ff_norm", stacked(*topo, L, "ff_norm.weight", true)},
                    {"grad_ln_f", params["ln_f.weight"].grad()},
                    {"grad_resid_lambdas", stacked(*topo, L, "resid_lambda", true).flatten()},
                    {"grad_x0_lambdas", stacked(*topo, L, "x0_lambda", true).flatten()},
                    {"grad_backout_lambda", params["backout_lambda"].grad()}});
    write_npy(folder + "/emb.npy", emb.detach());
    write_npy(folder + "/w.npy", w);
    write_npy(folder + "/attn_norm.npy", stacked(*topo, L, "attn_norm.weight"));
    write_npy(folder + "/ff_norm.npy", stacked(*topo, L, "ff_norm.weight"));
    write_npy(folder + "/ln_f.npy", params["ln_f.weight"].detach());
    write_npy(folder + "/resid_lambdas.npy", stacked(*topo, L, "resid_lambda").flatten());
    write_npy(folder + "/x0_lambdas.npy", stacked(*topo, L, "x0_lambda").flatten());
    write_npy(folder + "/backout_lambda.npy", params["backout_lambda"].detach());
    write_npy(folder + "/g.npy", g);
    std::ofstream(folder + "/case.txt") << cfg.layer_norm_eps << " " << L << "\n";
  }
  ASSERT_TRUE(siamese::testing::reference_ran("tests/model/speedrun_reference.py", folders, dir.file("log")));
  double worst[2] = {0.0, 0.0};  // float64, float32
  for (size_t k = 0; k < cases.size(); ++k) {
    const bool f64 = cases[k].dtype == torch::kDouble;
    SCOPED_TRACE("L=" + std::to_string(cases[k].n_layers) + (f64 ? ", float64" : ", float32"));
    double& w = worst[f64 ? 0 : 1];
    const std::string folder = dir.file("case" + std::to_string(k));
    w = std::max(w, siamese::testing::expect_matches_reference(folder, ours[k], cases[k].tolerance));
    // The model builds its scalars in float32: nanochat's values to float32's half ulp (6e-8).
    siamese::testing::expect_matches_reference(folder, inits[k], 1e-7);
  }
  std::cout << "[speedrun reference] largest error / scale: float64 " << worst[0] << ", float32 " << worst[1]
            << "\n";
}

// d loss / d scalar by central differences with h = 1e-6 in float64: the truncation error is
// h^2 |f'''| / 6 ~ 1e-13 and the rounding error 1e-16 |loss| / h ~ 1e-9 on a loss of ~4, so
// 1e-7 + 1e-5 |g| bounds both with room.
TEST(Speedrun, FiniteDifferencesOnTheLearnedScalarsFloat64) {
  for (const int64_t L : {2, 3, 4}) {
    SCOPED_TRACE("L=" + std::to_string(L));
    config::ModelConfig cfg = speedrun_config(L);
    torch::manual_seed(80 + L);
    Transformer m(cfg);
    m->eval();
    m->to(torch::kDouble);
    m->use_reference_attention(true);
    randomize(m->topology());
    torch::manual_seed(90);
    const auto ids = torch::randint(cfg.vocab_size, {2, 6}, torch::kLong);
    auto loss = [&] { return next_token_nll_sum(m->forward(ids), ids) / double(2 * 5); };
    m->zero_grad();
    loss().backward();
    torch::NoGradGuard g;
    int checked = 0;
    for (auto& p : m->topology().named_parameters()) {
      if (p.key().find("_lambda") == std::string::npos) continue;
      auto v = p.value();
      const double grad = v.grad().item<double>(), saved = v.item<double>(), h = 1e-6;
      v.fill_(saved + h);
      const double up = loss().item<double>();
      v.fill_(saved - h);
      const double down = loss().item<double>();
      v.fill_(saved);
      const double numeric = (up - down) / (2 * h);
      EXPECT_LT(std::abs(numeric - grad), 1e-7 + 1e-5 * std::abs(grad)) << p.key();
      EXPECT_GT(std::abs(grad), 1e-9) << p.key() << " has no gradient to check";
      ++checked;
    }
    EXPECT_EQ(checked, 2 * L + 1);
  }
}

// Neutral scalars (r = 1, a = 0, b = 0) leave Pre-Norm on RMS-normalized embeddings: the same
// weights in pre_embednorm give the same logits, bit for bit, since 1 * x, 0 * x0 and x - 0 * x_b
// round to x exactly.
TEST(Speedrun, NeutralScalarsArePreNormOnNormalizedEmbeddings) {
  config::ModelConfig cfg = speedrun_config(3);
  torch::manual_seed(3);
  Transformer speedrun(cfg);
  cfg.residual = "pre_embednorm";
  Transformer pre(cfg);
  for (auto* m : {&speedrun, &pre}) {
    (*m)->eval();
    (*m)->to(torch::kDouble);
  }
  torch::NoGradGuard g;
  auto pre_params = pre->named_parameters();
  for (auto& p : speedrun->named_parameters()) {
    const std::string& k = p.key();
    if (k.find("resid_lambda") != std::string::npos) {
      p.value().fill_(1.0);
    } else if (k.find("_lambda") != std::string::npos) {
      p.value().zero_();
    } else {
      if (k.find("_norm.weight") != std::string::npos || k.find("ln_f") != std::string::npos)
        pre_params[k].copy_(1.0 + 0.5 * torch::randn_like(pre_params[k]));
      p.value().copy_(pre_params[k]);
    }
  }
  const auto ids = torch::randint(cfg.vocab_size, {2, 7}, torch::kLong);
  EXPECT_TRUE(torch::equal(speedrun->forward(ids), pre->forward(ids)));
}

// The backout stream appears after block floor(L / 2) holding that block's residual; a model
// run for fewer blocks has none and its head reads LN_f(x) with nothing subtracted.
TEST(Speedrun, BackoutIsTheMidDepthResidualAndNeedsThatBlock) {
  const int64_t L = 4;
  config::ModelConfig cfg = speedrun_config(L);
  torch::manual_seed(5);
  Transformer m(cfg);
  m->eval();
  torch::NoGradGuard g;
  auto* ln_f = m->topology().named_modules()["ln_f"]->as<NormImpl>();
  const double b = m->topology().named_parameters()["backout_lambda"].item<double>();
  const auto ids = torch::randint(cfg.vocab_size, {1, 5}, torch::kLong);

  std::map<int64_t, std::map<std::string, torch::Tensor>> seen;
  const Probe probe = [&](int64_t layer, const std::string& stream, const torch::Tensor& t) {
    seen[layer][stream] = t;
  };
  ForwardOptions opts;
  opts.probe = &probe;
  m->forward(ids, opts);
  auto names = [&](int64_t layer) {
    std::vector<std::string> out;
    for (const auto& [name, t] : seen[layer]) out.push_back(name);
    return out;
  };
  EXPECT_EQ(names(L / 2 - 1), (std::vector<std::string>{"x", "x0"}));
  EXPECT_EQ(names(L / 2), (std::vector<std::string>{"backout", "x", "x0"}));
  EXPECT_TRUE(torch::equal(seen[L / 2]["backout"], seen[L / 2]["x"]));
  EXPECT_TRUE(torch::equal(seen[L - 1]["backout"], seen[L / 2]["x"]));
  EXPECT_TRUE(torch::allclose(seen[L]["final"], ln_f->forward(seen[L - 1]["x"] - b * seen[L / 2]["x"])));

  seen.clear();
  opts.n_blocks = L / 2;  // blocks 0 .. L/2 - 1: the backout block does not run
  m->forward(ids, opts);
  EXPECT_EQ(names(L / 2 - 1), (std::vector<std::string>{"x", "x0"}));
  EXPECT_TRUE(torch::equal(seen[L / 2]["final"], ln_f->forward(seen[L / 2 - 1]["x"])));
}

}  // namespace
}  // namespace siamese::model
