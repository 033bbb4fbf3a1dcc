// DeepCrossAttention (topology dca) against its rule written out with plain ops, against the
// PyPI package deep-cross-attention on the same weights (tests/model/dca_reference.py: logits
// and every gradient, whole models of 1 to 5 blocks). The state keeps the first and last k
// block outputs only. Central differences: Topologies.FiniteDifferenceGradientsFloat64.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "siamese/common/npy.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "support/python_reference.h"
#include "support/refusal.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

constexpr int64_t kDcaWidth = 8;

config::ModelConfig dca_config(int64_t n_layers, int64_t k) {
  config::ModelConfig c = siamese::testing::tiny_model("dca", {kDcaWidth, 2, n_layers, 61, 64, 32});
  c.layer_norm_type = config::LayerNormType::RMS;
  c.dca_past_layers = k;
  return c;
}

bool is_norm_weight(const std::string& name) {
  return name.find("norm") != std::string::npos && name.find(".weight") != std::string::npos;
}

// Every parameter of order one, so that a wrong source, norm or bias moves the result: norm
// weights and GRN biases 1 + 0.3 N(0, 1), GRN weights 0.5 N(0, 1) (the dynamic part then
// matters), matrices N(0, 1 / fan_in), embeddings N(0, 1), biases 0.1 N(0, 1).
void randomize_dca(torch::nn::Module& m) {
  torch::NoGradGuard g;
  for (auto& p : m.named_parameters()) {
    auto& v = p.value();
    const std::string& k = p.key();
    if (is_norm_weight(k) || k.find("grn_bias") != std::string::npos)
      v.copy_(1.0 + 0.3 * torch::randn_like(v));
    else if (k.find("grn_weight") != std::string::npos)
      v.copy_(0.5 * torch::randn_like(v));
    else if (k.rfind("wte", 0) == 0)
      v.copy_(torch::randn_like(v));
    else if (v.dim() == 2)
      v.copy_(torch::randn_like(v) / std::sqrt(double(v.size(1))));
    else
      v.copy_(0.1 * torch::randn_like(v));
  }
}

// The topology on fixed sublayer maps: attention F(q, k, v) = tanh(q A) * sigmoid(k B) + v C,
// which tells its three inputs apart, and MLP F(h) = tanh(h M).
class DcaFormula : public ::testing::Test {
 protected:
  static constexpr double kEps = 1e-5;  // the config's layer_norm_eps

  void build(int64_t n_layers, int64_t k) {
    cfg_ = dca_config(n_layers, k);
    torch::manual_seed(40 + 10 * n_layers + k);
    topo_ = make_topology(cfg_);
    topo_->to(torch::kDouble);
    randomize_dca(*topo_);
    w_.clear();
    for (int64_t i = 0; i < 4 * n_layers; ++i)
      w_.push_back(torch::randn({kDcaWidth, kDcaWidth}, torch::kDouble) / std::sqrt(double(kDcaWidth)));
    emb_ = torch::randn({2, 5, kDcaWidth}, torch::kDouble);
  }

  torch::Tensor attn(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     int64_t l) const {
    return torch::tanh(q.matmul(w_[4 * l])) * torch::sigmoid(k.matmul(w_[4 * l + 1])) +
           v.matmul(w_[4 * l + 2]);
  }
  torch::Tensor mlp(const torch::Tensor& h, int64_t l) const { return torch::tanh(h.matmul(w_[4 * l + 3])); }

  torch::Tensor P(const std::string& name) const { return *topo_->named_parameters().find(name); }
  torch::Tensor rms(const torch::Tensor& x, const std::string& norm) const {
    return x / (x.pow(2).mean(-1, true) + kEps).sqrt() * P(norm + ".weight") + P(norm + ".bias");
  }
  // GRN output o over `ys`, term by term: sum_i y_i (relu(w_o . N(y_i)) + b_{o,i}).
  torch::Tensor grn(const std::vector<torch::Tensor>& ys, const std::string& prefix,
                    const std::string& suffix, int64_t o) const {
    torch::Tensor out = torch::zeros_like(ys[0]);
    for (size_t i = 0; i < ys.size(); ++i) {
      const auto w = P(prefix + "grn_weight" + suffix)[o];
      const auto dynamic = torch::relu((rms(ys[i], prefix + "grn_norm" + suffix) * w).sum(-1, true));
      out = out + ys[i] * (dynamic + P(prefix + "grn_bias" + suffix)[o][int64_t(i)]);
    }
    return out;
  }
  // The first k and last k of `all`, or all of them.
  std::vector<torch::Tensor> selected(const std::vector<torch::Tensor>& all) const {
    const size_t k = size_t(cfg_.dca_past_layers);
    if (all.size() <= 2 * k) return all;
    std::vector<torch::Tensor> out(all.begin(), all.begin() + k);
    out.insert(out.end(), all.end() - k, all.end());
    return out;
  }

  torch::Tensor formula() const {
    std::vector<torch::Tensor> ys = {emb_};
    for (int64_t l = 0; l < cfg_.n_layers; ++l) {
      const std::string b = "blocks." + std::to_string(l) + ".";
      const auto sources = selected(ys);
      const auto q = grn(sources, b, "", 0), k = grn(sources, b, "", 1), v = grn(sources, b, "", 2);
      const auto a =
          attn(rms(q, b + "q_input_norm"), rms(k, b + "k_input_norm"), rms(v, b + "v_input_norm"), l);
      ys.push_back(a + mlp(rms(a + q, b + "ff_norm"), l));
    }
    return rms(grn(selected(ys), "", "_f", 0), "ln_f");
  }

  // The topology's output, and the stream names after each block.
  torch::Tensor run(std::vector<std::vector<std::string>>& names) {
    torch::NoGradGuard g;
    State st = topo_->begin(emb_);
    for (int64_t s = 0; s < 2 * cfg_.n_layers; ++s) {
      const int64_t l = s / 2;
      const auto in = topo_->enter(st, s);
      topo_->leave(st, s % 2 == 0 ? attn(in[0], in[1], in[2], l) : mlp(in, l), s);
      if (s % 2 == 1) names.push_back(st.names);
    }
    return topo_->finish(st);
  }

  config::ModelConfig cfg_;
  std::shared_ptr<TopologyImpl> topo_;
  std::vector<torch::Tensor> w_;
  torch::Tensor emb_;
};

// Every depth below, at past-layer counts that keep every source (L + 1 <= 2k), that cut one
// and that cut several.
TEST_F(DcaFormula, FollowsTheRuleAndKeepsTheFirstAndLastKOutputs) {
  struct Case {
    int64_t n_layers, k;
    std::vector<std::string> last_names;
  };
  const std::vector<Case> cases = {{1, 1, {"y0", "y1"}},
                                   {3, 2, {"y0", "y1", "y2", "y3"}},
                                   {4, 2, {"y0", "y1", "y3", "y4"}},
                                   {5, 1, {"y0", "y5"}},
                                   {5, 2, {"y0", "y1", "y4", "y5"}},
                                   {4, 3, {"y0", "y1", "y2", "y3", "y4"}},
                                   // A k far above the depth keeps every source; 2k would overflow int64.
                                   {3, int64_t(1) << 62, {"y0", "y1", "y2", "y3"}}};
  for (const auto& c : cases) {
    SCOPED_TRACE("L=" + std::to_string(c.n_layers) + " k=" + std::to_string(c.k));
    build(c.n_layers, c.k);
    std::vector<std::vector<std::string>> names;
    const auto out = run(names);
    EXPECT_LT((out - formula()).abs().max().item<double>(), 1e-12);
    EXPECT_EQ(names.back(), c.last_names);
    for (const auto& n : names) EXPECT_LE(int64_t(n.size()) - c.k, c.k);
  }
}

// A whole model, logits and the gradient of every shared parameter, against DCAGPT on the
// same weights. The package's attention has no biases and its head none: ours are zero and
// not compared. RMSNorm's eps is the package's (torch's default: the dtype's epsilon). The
// tolerance is 1e-10 of the scale in float64 (a few hundred roundings of 1e-16 through a
// 5-block model) and 1e-5 in float32 (6e-8 a rounding).
TEST(Dca, MatchesThePyPIPackageDeepCrossAttention) {
  struct Case {
    int64_t n_layers, k;
    torch::ScalarType dtype;
    double tolerance;
  };
  const std::vector<Case> cases = {{1, 2, torch::kDouble, 1e-10}, {2, 2, torch::kDouble, 1e-10},
                                   {3, 1, torch::kDouble, 1e-10}, {5, 2, torch::kDouble, 1e-10},
                                   {4, 3, torch::kDouble, 1e-10}, {4, 2, torch::kFloat, 1e-5}};
  siamese::testing::TempDir dir;
  std::string folders;
  std::vector<siamese::testing::NamedResults> ours;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string folder = siamese::testing::new_case_folder(dir, i, folders);
    config::ModelConfig cfg = dca_config(c.n_layers, c.k);
    cfg.activation_type = config::Activation::GELU;
    cfg.rope = true;
    cfg.include_bias = true;
    cfg.bias_for_layer_norm = false;
    cfg.weight_tying = false;
    cfg.layer_norm_eps = c.dtype == torch::kDouble ? std::numeric_limits<double>::epsilon()
                                                   : double(std::numeric_limits<float>::epsilon());
    torch::manual_seed(100 + i);
    Transformer m(cfg);
    m->to(c.dtype);
    randomize_dca(*m);
    siamese::testing::NamedResults result;
    {
      torch::NoGradGuard g;
      for (auto& p : m->named_parameters()) {
        const std::string& k = p.key();
        if (k.find("attn.att_proj.bias") != std::string::npos ||
            k.find("attn.attn_out.bias") != std::string::npos || k == "ff_out.bias")
          p.value().zero_();
      }
    }
    const auto ids = torch::randint(cfg.vocab_size, {2, 6}, torch::kLong);
    auto logits = m->forward(ids);
    auto g = torch::randn_like(logits);
    (logits * g).sum().backward();
    result.push_back({"logits", logits});
    for (auto& p : m->named_parameters()) {
      write_npy(folder + "/" + p.key() + ".npy", p.value().detach());
      const std::string& k = p.key();
      if (k.find("attn.att_proj.bias") == std::string::npos &&
          k.find("attn.attn_out.bias") == std::string::npos && k != "ff_out.bias")
        result.push_back({"grad_" + k, p.value().grad()});
    }
    write_npy(folder + "/ids.npy", ids);
    write_npy(folder + "/g.npy", g);
    std::ofstream(folder + "/case.txt") << cfg.embedding_size << " " << kDcaWidth << " " << cfg.n_heads << " "
                                        << c.n_layers << " " << c.k << "\n";
    ours.push_back(std::move(result));
  }
  ASSERT_TRUE(siamese::testing::reference_ran("tests/model/dca_reference.py", folders, dir.file("log")));
  double worst[2] = {0.0, 0.0};  // float64, float32
  for (size_t i = 0; i < cases.size(); ++i) {
    const bool f64 = cases[i].dtype == torch::kDouble;
    SCOPED_TRACE("L=" + std::to_string(cases[i].n_layers) + " k=" + std::to_string(cases[i].k) +
                 (f64 ? ", float64" : ", float32"));
    double& w = worst[f64 ? 0 : 1];
    w = std::max(w, siamese::testing::expect_matches_reference(dir.file("case" + std::to_string(i)), ours[i],
                                                               cases[i].tolerance));
  }
  std::cout << "[dca reference] largest error / scale: float64 " << worst[0] << ", float32 " << worst[1]
            << "\n";
}

TEST(Dca, NoPastLayersIsRefusedNamingTheKey) {
  config::ModelConfig cfg = dca_config(2, 0);
  siamese::testing::expect_refused([&] { check_model_config(cfg); }, "(model.dca_past_layers)", "");
}

}  // namespace
}  // namespace siamese::model
