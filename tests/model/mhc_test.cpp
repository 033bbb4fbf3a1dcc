// mHC (topology mhc) against the reference the issue names: transformers'
// DeepseekV4HyperConnection and DeepseekV4HyperHead (tests/model/mhc_reference.py) loaded with
// the same weights, on random streams and a random sublayer output: F's input, the updated
// streams, the head's output and every gradient, float64 to 1e-10 and float32 to 1e-5, for
// several stream counts and Sinkhorn iteration counts. And mHC-lite's mixing matrices,
// recovered from the streams it mixes, are doubly stochastic with non-negative entries.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
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

struct ReferenceCase {
  int64_t n, iters;
  torch::ScalarType dtype;
  double tolerance;
};

constexpr int64_t kMhcWidth = 8;

// A one-layer topology of `residual` whose parameters are all random (projections of order
// 0.3, so the mixing logits are of order 1; scales, biases and norm weights around 1).
std::shared_ptr<TopologyImpl> random_manifold_topology(const std::string& residual, int64_t n, int64_t iters,
                                                       torch::ScalarType dtype) {
  config::ModelConfig cfg = siamese::testing::tiny_model(residual, {kMhcWidth, 2, 1, 61, 64, 32});
  cfg.layer_norm_type = config::LayerNormType::RMS;
  cfg.include_bias = false;
  cfg.hc_rate = n;
  cfg.mhc_sinkhorn_iters = iters;
  torch::manual_seed(100 * n + iters);
  auto topo = make_topology(cfg);
  topo->to(dtype);
  torch::NoGradGuard g;
  for (auto& p : topo->named_parameters()) {
    auto& v = p.value();
    const bool projection = p.key().size() > 2 && p.key().compare(p.key().size() - 2, 2, "fn") == 0;
    v.copy_(projection ? 0.3 * torch::randn_like(v) : 1.0 + 0.5 * torch::randn_like(v));
  }
  return topo;
}

State streams_of(const torch::Tensor& h) {
  State st;
  for (int64_t i = 0; i < h.size(2); ++i) {
    st.names.push_back("h" + std::to_string(i));
    st.streams.push_back(h.select(2, i));
  }
  return st;
}

TEST(MhcReference, MatchesTransformersDeepseekV4HyperConnectionAndHead) {
  const std::vector<ReferenceCase> cases = {
      {2, 20, torch::kDouble, 1e-10}, {3, 1, torch::kDouble, 1e-10}, {4, 5, torch::kDouble, 1e-10},
      {4, 20, torch::kDouble, 1e-10}, {2, 20, torch::kFloat, 1e-5},  {3, 1, torch::kFloat, 1e-5},
      {4, 5, torch::kFloat, 1e-5},    {4, 20, torch::kFloat, 1e-5},
  };
  siamese::testing::TempDir dir;
  std::string folders;
  // Per case: what this topology computed, by the name mhc_reference.py gives its result.
  std::vector<siamese::testing::NamedResults> ours;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const std::string folder = siamese::testing::new_case_folder(dir, k, folders);
    auto topo = random_manifold_topology("mhc", c.n, c.iters, c.dtype);
    const auto opts = torch::TensorOptions().dtype(c.dtype);
    auto h = torch::randn({2, 3, c.n, kMhcWidth}, opts).requires_grad_();
    auto f = torch::randn({2, 3, kMhcWidth}, opts).requires_grad_();
    State st = streams_of(h);
    auto x = topo->enter(st, 0);
    topo->leave(st, f, 0);
    auto h2 = torch::stack(st.streams, 2);
    auto out = topo->finish(st);
    auto gx = torch::randn_like(x), gh = torch::randn_like(h2), gout = torch::randn_like(out);
    ((x * gx).sum() + (h2 * gh).sum() + (out * gout).sum()).backward();

    auto params = topo->named_parameters();
    const std::vector<std::pair<std::string, std::string>> names = {
        {"fn", "blocks.0.attn_mhc_fn"},
        {"base", "blocks.0.attn_mhc_base"},
        {"scale", "blocks.0.attn_mhc_scale"},
        {"head_fn", "mhc_head_fn"},
        {"head_base", "mhc_head_base"},
        {"head_scale", "mhc_head_scale"},
        {"attn_norm", "blocks.0.attn_norm.weight"},
        {"ln_f", "ln_f.weight"}};
    std::vector<std::pair<std::string, torch::Tensor>> results = {
        {"x", x}, {"h2", h2}, {"out", out}, {"grad_h", h.grad()}, {"grad_f", f.grad()}};
    for (const auto& [file, name] : names) {
      write_npy(folder + "/" + file + ".npy", params[name].detach());
      results.emplace_back("grad_" + file, params[name].grad());
    }
    for (const auto& [file, t] : std::vector<std::pair<std::string, torch::Tensor>>{
             {"h", h}, {"f", f}, {"gx", gx}, {"gh", gh}, {"gout", gout}})
      write_npy(folder + "/" + file + ".npy", t.detach());
    std::ofstream(folder + "/case.txt") << c.n << " " << c.iters << " 1e-05 1e-06\n";
    ours.push_back(results);
  }
  const std::string log = dir.file("log");
  ASSERT_EQ(siamese::testing::run_python_reference("tests/model/mhc_reference.py", folders, log), 0)
      << siamese::testing::read_all(log);
  double worst[2] = {0.0, 0.0};  // float64, float32: largest error relative to the scale
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    SCOPED_TRACE("n " + std::to_string(c.n) + ", " + std::to_string(c.iters) + " iterations, " +
                 (c.dtype == torch::kDouble ? "float64" : "float32"));
    double& w = worst[c.dtype == torch::kDouble ? 0 : 1];
    w = std::max(w, siamese::testing::expect_matches_reference(dir.file("case" + std::to_string(k)), ours[k],
                                                               c.tolerance));
  }
  std::cout << "[mhc reference] largest error / scale: float64 " << worst[0] << ", float32 " << worst[1]
            << "\n";
}

// comb^T per token from a sublayer with F = 0: the streams after it are comb^T H, and H
// ([n, d], d > n, random) has full row rank, so comb^T = H' H^+.
TEST(MhcLite, EveryMixingMatrixIsDoublyStochastic) {
  for (int64_t n : {2, 3, 4}) {
    SCOPED_TRACE("n " + std::to_string(n));
    auto topo = random_manifold_topology("mhc_lite", n, 1, torch::kDouble);
    for (int64_t s = 0; s < 2; ++s) {
      torch::NoGradGuard g;
      auto h = 3.0 * torch::randn({4, 5, n, kMhcWidth}, torch::kDouble);
      State st = streams_of(h);
      auto in = topo->enter(st, s);
      topo->leave(st, torch::zeros_like(in), s);
      auto comb_t = torch::matmul(torch::stack(st.streams, 2), torch::linalg_pinv(h));  // [.., n, n]
      EXPECT_LT((comb_t.sum(-1) - 1).abs().max().item<double>(), 1e-6);
      EXPECT_LT((comb_t.sum(-2) - 1).abs().max().item<double>(), 1e-6);
      EXPECT_GT(comb_t.min().item<double>(), -1e-9);
      // Not a fixed matrix: the weights depend on the token.
      EXPECT_GT((comb_t - comb_t.select(0, 0).select(0, 0)).abs().max().item<double>(), 1e-3);
    }
  }
}

// Under a bf16 autocast the connection weights, Sinkhorn and the mixing stay float32: the
// post weights and mixed streams equal those computed without autocast, bit for bit.
TEST(MhcReference, ConnectionWeightsStayFloat32UnderBf16Autocast) {
  for (const char* residual : {"mhc", "mhc_lite"}) {
    SCOPED_TRACE(residual);
    auto topo = random_manifold_topology(residual, 4, 20, torch::kFloat);
    torch::NoGradGuard g;
    auto h = torch::randn({2, 3, 4, kMhcWidth});
    State plain = streams_of(h), amp = streams_of(h);
    topo->enter(plain, 0);
    {
      AutocastGuard bf16(torch::kCPU, torch::kBFloat16);
      topo->enter(amp, 0);
    }
    EXPECT_EQ(amp.carry.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(amp.carry, plain.carry));
    EXPECT_TRUE(torch::equal(torch::stack(amp.streams), torch::stack(plain.streams)));
  }
}

TEST(MhcLite, TooManyStreamsIsRefusedNamingTheKey) {
  config::ModelConfig cfg = siamese::testing::tiny_model("mhc_lite", {kMhcWidth, 2, 1, 61, 64, 32});
  cfg.hc_rate = 7;
  siamese::testing::expect_refused([&] { make_topology(cfg); }, "model.hc_rate", "at most 6");
}

}  // namespace
}  // namespace siamese::model
