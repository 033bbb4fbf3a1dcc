// Attention Residuals (topology attnres) against the paper's equations written out with plain
// ops in float64, one source at a time: the softmax over w_s . RMSNorm(v_i), the sublayer's
// pre-norm on the mixture, the head's own query, and Block AttnRes's sources (embeddings,
// completed block sums, the current block's partial sum) for several block sizes. Block
// size 1 is Full AttnRes bit for bit; the state keeps 1 + ceil(2L / S) tensors at most; zero
// queries (the init) give the uniform average; the mixing weights stay float32 under a bf16
// autocast. And one sublayer's mixing against the PyPI package attn-res
// (tests/model/attnres_reference.py), values and gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "siamese/common/autocast.h"
#include "siamese/common/error.h"
#include "siamese/common/npy.h"
#include "siamese/model/topology_table.h"
#include "support/files.h"
#include "support/process.h"
#include "support/python_reference.h"
#include "support/refusal.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

constexpr int64_t kResWidth = 8, kResLayers = 4;

class AttnResFormula : public ::testing::Test {
 protected:
  // A topology with block size `block` whose queries are N(0, 0.7) and norm weights 1 + 0.5 N(0, 1).
  void build(int64_t block, bool random = true) {
    cfg_ = siamese::testing::tiny_model("attnres", {kResWidth, 2, kResLayers, 61, 64, 32});
    cfg_.layer_norm_type = config::LayerNormType::RMS;
    cfg_.include_bias = false;
    cfg_.attnres_block_size = block;
    torch::manual_seed(41);
    topo_ = make_topology(cfg_);
    topo_->to(torch::kDouble);
    torch::NoGradGuard g;
    if (random)
      for (auto& p : topo_->named_parameters()) {
        auto& v = p.value();
        const bool query = p.key().find("res_query") != std::string::npos;
        v.copy_(query ? 0.7 * torch::randn_like(v) : 1.0 + 0.5 * torch::randn_like(v));
      }
    w_.clear();
    for (int64_t s = 0; s < 2 * kResLayers; ++s)
      w_.push_back(torch::randn({kResWidth, kResWidth}, torch::kDouble) / std::sqrt(double(kResWidth)));
    emb_ = torch::randn({2, 5, kResWidth}, torch::kDouble);
  }

  torch::Tensor F(const torch::Tensor& h, int64_t s) const { return torch::tanh(h.matmul(w_[s])); }
  torch::Tensor P(const std::string& name) const { return *topo_->named_parameters().find(name); }
  torch::Tensor rms(const torch::Tensor& x, const std::string& norm) const {
    return x / (x.pow(2).mean(-1, true) + cfg_.layer_norm_eps).sqrt() * P(norm + ".weight");
  }
  static std::string site(int64_t s, const std::string& attn, const std::string& ff) {
    return "blocks." + std::to_string(s / 2) + "." + (s % 2 == 0 ? attn : ff);
  }

  // sum_i a_i v_i with a = softmax(q . RMSNorm(v_i)), every logit and weight a [B, T, 1] term.
  torch::Tensor mix(const std::vector<torch::Tensor>& v, const torch::Tensor& q,
                    std::vector<torch::Tensor>* weights) const {
    std::vector<torch::Tensor> e;
    auto denom = torch::zeros({2, 5, 1}, torch::kDouble);
    for (const auto& src : v) {
      auto key = src / (src.pow(2).mean(-1, true) + cfg_.layer_norm_eps).sqrt();
      e.push_back(torch::exp((key * q).sum(-1, true)));
      denom = denom + e.back();
    }
    auto h = torch::zeros_like(emb_);
    for (size_t i = 0; i < v.size(); ++i) {
      weights->push_back(e[i] / denom);
      h = h + weights->back() * v[i];
    }
    return h;
  }

  // The paper's forward with block size S (0: every output its own source); fills the
  // weights of every sublayer and of the head.
  torch::Tensor expected(int64_t block, std::vector<std::vector<torch::Tensor>>* weights) {
    const int64_t S = std::max<int64_t>(block, 1);
    std::vector<torch::Tensor> done = {emb_};
    torch::Tensor partial;
    auto sources = [&] {
      auto v = done;
      if (partial.defined()) v.push_back(partial);
      return v;
    };
    for (int64_t s = 0; s < 2 * kResLayers; ++s) {
      weights->emplace_back();
      torch::Tensor h;
      if (s == 0) {
        h = emb_;
        weights->back().push_back(torch::ones({2, 5, 1}, torch::kDouble));
      } else {
        h = mix(sources(), P(site(s, "attn_res_query", "ff_res_query")), &weights->back());
      }
      auto o = F(rms(h, site(s, "attn_norm", "ff_norm")), s);
      partial = partial.defined() ? partial + o : o;
      if ((s + 1) % S == 0) {
        done.push_back(partial);
        partial = torch::Tensor();
      }
    }
    weights->emplace_back();
    return rms(mix(sources(), P("res_query_f"), &weights->back()), "ln_f");
  }

  // The topology's forward; the weights it records per sublayer and at the head; the largest
  // number of tensors its state held.
  torch::Tensor run(std::vector<torch::Tensor>* weights, size_t* most_streams) {
    torch::NoGradGuard g;
    State st = topo_->begin(emb_);
    *most_streams = st.streams.size();
    for (int64_t s = 0; s < 2 * kResLayers; ++s) {
      auto in = topo_->enter(st, s);
      weights->push_back(st.mixing.at(0).second);
      topo_->leave(st, F(in, s), s);
      *most_streams = std::max(*most_streams, st.streams.size());
    }
    auto out = topo_->finish(st);
    weights->push_back(st.mixing.at(0).second);
    return out;
  }

  config::ModelConfig cfg_;
  std::shared_ptr<TopologyImpl> topo_;
  std::vector<torch::Tensor> w_;
  torch::Tensor emb_;
};

TEST_F(AttnResFormula, FullAndBlockFollowThePapersEquations) {
  for (int64_t block : {0, 1, 2, 3, 4, 8}) {
    SCOPED_TRACE("attnres_block_size " + std::to_string(block));
    build(block);
    std::vector<std::vector<torch::Tensor>> want_w;
    const auto want = expected(block, &want_w);
    std::vector<torch::Tensor> got_w;
    size_t most = 0;
    const auto got = run(&got_w, &most);
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-12);
    ASSERT_EQ(got_w.size(), want_w.size());
    for (size_t s = 0; s < got_w.size(); ++s) {
      SCOPED_TRACE("sublayer " + std::to_string(s));
      ASSERT_EQ(got_w[s].size(-1), int64_t(want_w[s].size()));
      for (size_t i = 0; i < want_w[s].size(); ++i)
        EXPECT_LT((got_w[s].narrow(-1, int64_t(i), 1) - want_w[s][i]).abs().max().item<double>(), 1e-14);
    }
    // Block AttnRes bounds the state: the embeddings, the completed blocks and one partial sum.
    const int64_t S = std::max<int64_t>(block, 1);
    EXPECT_EQ(most, size_t(1 + (2 * kResLayers + S - 1) / S));
  }
}

TEST_F(AttnResFormula, BlockSizeOneIsFullAttnResExactly) {
  build(0);
  std::vector<torch::Tensor> w_full, w_one;
  size_t most_full = 0, most_one = 0;
  const auto full = run(&w_full, &most_full);
  cfg_.attnres_block_size = 1;
  auto params = topo_->named_parameters();
  auto one_topo = make_topology(cfg_);
  one_topo->to(torch::kDouble);
  {
    torch::NoGradGuard g;
    for (auto& p : one_topo->named_parameters()) p.value().copy_(*params.find(p.key()));
  }
  topo_ = one_topo;
  EXPECT_TRUE(torch::equal(run(&w_one, &most_one), full));
  EXPECT_EQ(most_one, most_full);
  EXPECT_EQ(most_full, size_t(2 * kResLayers + 1));
}

// The pseudo-queries start at zero: every sublayer reads the plain average of its sources.
TEST_F(AttnResFormula, ZeroQueriesAtInitGiveTheUniformAverage) {
  for (int64_t block : {0, 3}) {
    SCOPED_TRACE("attnres_block_size " + std::to_string(block));
    build(block, /*random=*/false);
    for (auto& p : topo_->named_parameters()) {
      if (p.key().find("res_query") != std::string::npos) {
        EXPECT_EQ(p.value().abs().max().item<double>(), 0.0);
      }
    }
    std::vector<torch::Tensor> w;
    size_t most = 0;
    run(&w, &most);
    for (const auto& a : w) EXPECT_LT((a - 1.0 / double(a.size(-1))).abs().max().item<double>(), 1e-15);
    // The input of the last sublayer is LN(mean of its sources).
    torch::NoGradGuard g;
    State st = topo_->begin(emb_);
    for (int64_t s = 0; s + 1 < 2 * kResLayers; ++s) topo_->leave(st, F(topo_->enter(st, s), s), s);
    const auto mean = torch::stack(st.streams).mean(0);
    const auto in = topo_->enter(st, 2 * kResLayers - 1);
    EXPECT_LT(
        (in - rms(mean, "blocks." + std::to_string(kResLayers - 1) + ".ff_norm")).abs().max().item<double>(),
        1e-12);
  }
}

// Under a bf16 autocast the sources are stored and mixed in float32: the weights and the
// mixture equal those computed without autocast, bit for bit.
TEST(AttnRes, MixingStaysFloat32UnderBf16Autocast) {
  config::ModelConfig cfg = siamese::testing::tiny_model("attnres", {kResWidth, 2, 2, 61, 64, 32});
  cfg.attnres_block_size = 2;
  torch::manual_seed(5);
  auto topo = make_topology(cfg);
  torch::NoGradGuard g;
  for (auto& p : topo->named_parameters())
    if (p.key().find("res_query") != std::string::npos) p.value().normal_(0.0, 0.7);
  auto emb = torch::randn({2, 3, kResWidth});
  auto f = torch::randn({2, 3, kResWidth}).to(torch::kBFloat16);  // an autocast matmul's output
  State plain = topo->begin(emb), amp = topo->begin(emb);
  for (int64_t s = 0; s < 3; ++s) {
    topo->enter(plain, s);
    topo->leave(plain, f, s);
    {
      AutocastGuard bf16(torch::kCPU, torch::kBFloat16);
      topo->enter(amp, s);
      topo->leave(amp, f, s);
    }
  }
  auto in_plain = topo->enter(plain, 3);
  torch::Tensor in_amp;
  {
    AutocastGuard bf16(torch::kCPU, torch::kBFloat16);
    in_amp = topo->enter(amp, 3);
  }
  for (const auto& v : amp.streams) EXPECT_EQ(v.scalar_type(), torch::kFloat);
  EXPECT_EQ(amp.mixing.at(0).second.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(amp.mixing.at(0).second, plain.mixing.at(0).second));
  EXPECT_TRUE(torch::equal(in_amp, in_plain));
}

// One sublayer's F input LN_s(sum_i a_i v_i) and its gradients (sources, query, norm weight)
// against attn-res's AttnResOperator and RMSNorm with the same values, at sublayers reading 2
// to 5 sources (blocks of 2: v0, s / 2 block sums and, for odd s, a partial sum), float64 to
// 1e-10 and float32 to 1e-5 of the scale.
TEST(AttnRes, OneSublayerMatchesThePyPIPackageAttnRes) {
  struct Case {
    int64_t sublayer;
    torch::ScalarType dtype;
    double tolerance;
  };
  const std::vector<Case> cases = {{1, torch::kDouble, 1e-10}, {2, torch::kDouble, 1e-10},
                                   {5, torch::kDouble, 1e-10}, {7, torch::kDouble, 1e-10},
                                   {3, torch::kFloat, 1e-5},   {7, torch::kFloat, 1e-5}};
  siamese::testing::TempDir dir;
  std::string folders;
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> ours;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const std::string folder = dir.file("case" + std::to_string(k));
    std::filesystem::create_directories(folder);
    config::ModelConfig cfg = siamese::testing::tiny_model("attnres", {kResWidth, 2, 4, 61, 64, 32});
    cfg.layer_norm_type = config::LayerNormType::RMS;
    cfg.include_bias = false;
    cfg.attnres_block_size = 2;
    torch::manual_seed(60 + k);
    auto topo = make_topology(cfg);
    topo->to(c.dtype);
    const int64_t s = c.sublayer, n = 1 + s / 2 + s % 2;
    const std::string query =
        "blocks." + std::to_string(s / 2) + (s % 2 == 0 ? ".attn_res_query" : ".ff_res_query");
    const std::string norm = "blocks." + std::to_string(s / 2) + (s % 2 == 0 ? ".attn_norm" : ".ff_norm");
    auto params = topo->named_parameters();
    {
      torch::NoGradGuard g;
      params[query].normal_(0.0, 0.7);
      params[norm + ".weight"].copy_(1.0 + 0.5 * torch::randn_like(params[norm + ".weight"]));
    }
    const auto opts = torch::TensorOptions().dtype(c.dtype);
    // Sources of different scales, as layer outputs are.
    auto v = (torch::randn({n, 2, 3, kResWidth}, opts) * torch::rand({n, 1, 1, 1}, opts).mul(3).add(0.2))
                 .requires_grad_();
    State st;
    for (int64_t i = 0; i < v.size(0); ++i) {
      st.names.push_back(s % 2 == 1 && i + 1 == n ? "partial" : "v" + std::to_string(i));
      st.streams.push_back(v[i]);
    }
    auto x = topo->enter(st, s);
    auto g = torch::randn_like(x);
    (x * g).sum().backward();
    ours.push_back({{"x", x},
                    {"grad_sources", v.grad()},
                    {"grad_query", params[query].grad()},
                    {"grad_attn_norm", params[norm + ".weight"].grad()}});
    write_npy(folder + "/sources.npy", v.detach());
    write_npy(folder + "/query.npy", params[query].detach());
    write_npy(folder + "/attn_norm.npy", params[norm + ".weight"].detach());
    write_npy(folder + "/g.npy", g);
    std::ofstream(folder + "/case.txt") << cfg.layer_norm_eps << "\n";
    folders += " " + folder;
  }
  ASSERT_TRUE(siamese::testing::reference_ran("tests/model/attnres_reference.py", folders, dir.file("log")));
  double worst[2] = {0.0, 0.0};  // float64, float32
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE("sublayer " + std::to_string(cases[k].sublayer) + ", " +
                 (cases[k].dtype == torch::kDouble ? "float64" : "float32"));
    double& w = worst[cases[k].dtype == torch::kDouble ? 0 : 1];
    w = std::max(w, siamese::testing::expect_matches_reference(dir.file("case" + std::to_string(k)), ours[k],
                                                               cases[k].tolerance));
  }
  std::cout << "[attnres reference] largest error / scale: float64 " << worst[0] << ", float32 " << worst[1]
            << "\n";
}

TEST(AttnRes, NegativeBlockSizeIsRefusedNamingTheKey) {
  config::ModelConfig cfg = siamese::testing::tiny_model("attnres", {kResWidth, 2, 2, 61, 64, 32});
  cfg.attnres_block_size = -1;
  // Built in code, the error names the key in parentheses (no file or line to name).
  siamese::testing::expect_refused([&] { check_model_config(cfg); }, "(model.attnres_block_size)",
                                   "0 (Full AttnRes)");
}

}  // namespace
}  // namespace siamese::model
