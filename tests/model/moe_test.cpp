// The sparse MoE feed-forward (block_type moe, mlp.h) against the reference the issue names,
// transformers' OlmoeSparseMoeBlock and load_balancing_loss_func (tests/model/moe_reference.py)
// with the same weights: output, router logits, both auxiliary losses and every gradient in
// float32 to 1e-5. In float64 against a per-token re-derivation of the routing (no grouping),
// dropless and with capacity dropping, with and without the shared expert; the grouped GEMM
// against the per-expert loop. And in a whole
// model: one expert with weight 1 is the dense MLP, for every topology; the parameter count
// matches the built model and FLOPs count the active experts only.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "siamese/common/autocast.h"
#include "siamese/common/npy.h"
#include "siamese/config/load.h"
#include "siamese/model/accounting.h"
#include "siamese/model/attention.h"
#include "siamese/model/moe_mlp.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "support/autograd_graph.h"
#include "support/files.h"
#include "support/process.h"
#include "support/python_reference.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

constexpr int64_t kMoeWidth = 8, kMoeInner = 5;

config::ModelConfig moe_config(int64_t experts, int64_t top_k) {
  config::ModelConfig cfg = siamese::testing::tiny_model("pre", {kMoeWidth, 2, 1, 61, 64, 32});
  cfg.block_type = config::BlockType::Moe;
  cfg.include_bias = false;
  cfg.mlp_hidden_size = 2 * kMoeInner;
  cfg.moe_num_experts = experts;
  cfg.moe_top_k = top_k;
  return cfg;
}

// Random weights: router logits of order 1, experts of order 0.3.
MoeMlp random_moe(const config::ModelConfig& cfg, torch::ScalarType dtype, uint64_t seed) {
  torch::manual_seed(seed);
  MoeMlp mlp(cfg);
  mlp->to(dtype);
  torch::NoGradGuard g;
  for (auto& p : mlp->named_parameters())
    p.value().copy_((p.key() == "router.weight" ? 1.0 : 0.3) * torch::randn_like(p.value()));
  return mlp;
}

struct OlmoeCase {
  int64_t experts, top_k;
  bool norm_topk;
};

TEST(MoeReference, MatchesTransformersOlmoeSparseMoeBlock) {
  const std::vector<OlmoeCase> cases = {{6, 2, false}, {4, 1, true}, {8, 3, false}, {8, 3, true}};
  const double lbl_weight = 0.5, z_weight = 0.25;
  siamese::testing::TempDir dir;
  std::string folders;
  std::vector<siamese::testing::NamedResults> ours;
  for (const auto& c : cases) {
    const std::string folder = siamese::testing::new_case_folder(dir, ours.size(), folders);
    auto cfg = moe_config(c.experts, c.top_k);
    cfg.moe_norm_topk_prob = c.norm_topk;
    auto mlp = random_moe(cfg, torch::kFloat, 7 + ours.size());
    auto x = torch::randn({3, 5, kMoeWidth}).requires_grad_();
    const auto routed = mlp->route(x);
    const auto& out = routed.out;
    const auto* stats = &routed;
    auto g = torch::randn_like(out);
    ((out * g).sum() + lbl_weight * stats->load_balancing + z_weight * stats->z_loss).backward();
    const auto logits = torch::linear(x.reshape({-1, kMoeWidth}), mlp->router->weight);
    ours.push_back({{"out", out},
                    {"logits", logits},
                    {"lbl", stats->load_balancing.reshape({1})},
                    {"z", stats->z_loss.reshape({1})},
                    {"grad_x", x.grad()},
                    {"grad_router", mlp->router->weight.grad()},
                    {"grad_ff_proj", mlp->expert_ff_proj.grad()},
                    {"grad_ff_out", mlp->expert_ff_out.grad()}});
    write_npy(folder + "/x.npy", x.detach());
    write_npy(folder + "/g.npy", g);
    write_npy(folder + "/router.npy", mlp->router->weight.detach());
    write_npy(folder + "/ff_proj.npy", mlp->expert_ff_proj.detach());
    write_npy(folder + "/ff_out.npy", mlp->expert_ff_out.detach());
    std::ofstream(folder + "/case.txt") << c.experts << " " << c.top_k << " " << (c.norm_topk ? 1 : 0) << " "
                                        << lbl_weight << " " << z_weight << "\n";
  }
  const std::string log = dir.file("log");
  ASSERT_EQ(siamese::testing::run_python_reference("tests/model/moe_reference.py", folders, log), 0)
      << siamese::testing::read_all(log);
  double worst = 0.0;
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE("case " + std::to_string(k));
    worst = std::max(worst, siamese::testing::expect_matches_reference(dir.file("case" + std::to_string(k)),
                                                                       ours[k], 1e-5));
  }
  std::cout << "[moe reference] largest float32 error / scale vs OlmoeSparseMoeBlock: " << worst << "\n";
}

// The routing written out token by token in float64: softmax, the top_k by value, the
// capacity rule on assignments in token-major order, each selected expert's SwiGLU.
struct MoeByHand {
  torch::Tensor out, lbl, z;
  int64_t dropped = 0;
};

MoeByHand moe_by_hand(MoeMlpImpl& mlp, const config::ModelConfig& cfg, const torch::Tensor& x) {
  const int64_t n = x.numel() / kMoeWidth, experts = cfg.moe_num_experts, k = cfg.moe_top_k;
  const auto flat = x.reshape({n, kMoeWidth});
  const auto logits = torch::mm(flat, mlp.router->weight.t());
  const int64_t capacity =
      cfg.moe_dropless ? n * k : int64_t(cfg.moe_capacity_factor * double(n * k) / double(experts));
  std::vector<int64_t> seen(experts, 0);
  std::vector<torch::Tensor> rows;
  auto probs = torch::zeros({n, experts}, x.options());
  auto share = torch::zeros({experts}, x.options());
  MoeByHand r;
  for (int64_t t = 0; t < n; ++t) {
    const auto p = torch::exp(logits[t] - logits[t].max());
    probs[t] = p / p.sum();
    std::vector<int64_t> order(experts);
    std::iota(order.begin(), order.end(), 0);
    const auto pt = probs[t].contiguous();
    const double* pv = pt.data_ptr<double>();
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return pv[a] > pv[b]; });
    double kept_mass = 0.0;
    for (int64_t j = 0; j < k; ++j) kept_mass += pv[order[j]];
    auto row = torch::zeros({kMoeWidth}, x.options());
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[j];
      share[e] += 1.0 / double(n * k);
      if (seen[e]++ >= capacity) {
        ++r.dropped;
        continue;
      }
      const auto h = torch::mv(mlp.expert_ff_proj[e], flat[t]);
      const auto value = h.narrow(0, 0, kMoeInner), gate = h.narrow(0, kMoeInner, kMoeInner);
      const auto act = gate / (1.0 + torch::exp(-gate)) * value;
      const double w = cfg.moe_norm_topk_prob ? pv[e] / kept_mass : pv[e];
      row = row + w * torch::mv(mlp.expert_ff_out[e], act);
    }
    if (mlp.ff_proj) {
      const auto h = torch::mv(mlp.ff_proj->weight, flat[t]);
      const auto value = h.narrow(0, 0, kMoeInner), gate = h.narrow(0, kMoeInner, kMoeInner);
      row = row + torch::mv(mlp.ff_out->weight, gate / (1.0 + torch::exp(-gate)) * value);
    }
    rows.push_back(row);
  }
  r.out = torch::stack(rows).reshape(x.sizes());
  r.lbl = double(experts) * (share * probs.mean(0)).sum();
  const auto m = std::get<0>(logits.max(1, true));
  r.z = (m.squeeze(1) + torch::log(torch::exp(logits - m).sum(1))).square().mean();
  return r;
}

TEST(MoeLayer, EqualsThePerTokenRoutingInFloat64) {
  struct Case {
    int64_t experts, top_k;
    bool norm_topk, shared, dropless;
    double capacity_factor;
  };
  const std::vector<Case> cases = {{6, 2, false, false, true, 1.0},
                                   {6, 2, true, true, true, 1.0},
                                   {5, 3, false, false, false, 0.5},
                                   {5, 3, true, true, false, 1.0},
                                   {4, 1, false, false, false, 0.25}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i));
    auto cfg = moe_config(c.experts, c.top_k);
    cfg.moe_norm_topk_prob = c.norm_topk;
    cfg.moe_shared_expert = c.shared;
    cfg.moe_dropless = c.dropless;
    cfg.moe_capacity_factor = c.capacity_factor;
    auto mlp = random_moe(cfg, torch::kDouble, 40 + i);
    const auto x = torch::randn({4, 6, kMoeWidth}, torch::kDouble);
    const auto routed = mlp->route(x);
    const auto& got = routed.out;
    const auto* stats = &routed;
    torch::NoGradGuard g;
    const auto want = moe_by_hand(*mlp, cfg, x);
    EXPECT_LT((got - want.out).abs().max().item<double>(), 1e-12);
    EXPECT_NEAR(stats->load_balancing.item<double>(), want.lbl.item<double>(), 1e-12);
    EXPECT_NEAR(stats->z_loss.item<double>(), want.z.item<double>(), 1e-10);
    EXPECT_EQ(stats->dropped.item<int64_t>(), want.dropped);
    EXPECT_EQ(stats->assignments, 24 * c.top_k);
    EXPECT_EQ(stats->tokens_per_expert.sum().item<int64_t>(), stats->assignments);
    if (!c.dropless && c.capacity_factor < 1.0) {
      EXPECT_GT(stats->dropped.item<int64_t>(), 0);
    }
  }
}

// The experts as LibTorch's grouped GEMM (at::_grouped_mm, the default where it runs) give
// the per-expert loop's (moe_mlp_impl loop) output, losses and gradients, dropless
// and dropping, with the shared expert, in float32 and under bf16 autocast. Widths whose rows
// the grouped kernels cannot take (5 floats, 20 bytes) fall back to the loop.
TEST(MoeLayer, GroupedGemmEqualsThePerExpertLoop) {
  struct Case {
    int64_t inner;
    bool shared, dropless, autocast;
  };
  const std::vector<Case> cases = {{8, false, true, false},
                                   {8, true, false, false},
                                   {8, false, true, true},
                                   {kMoeInner, false, true, false}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    SCOPED_TRACE("case " + std::to_string(i));
    auto cfg = moe_config(6, 2);
    cfg.mlp_hidden_size = 2 * c.inner;
    cfg.moe_shared_expert = c.shared;
    cfg.moe_dropless = c.dropless;
    cfg.moe_capacity_factor = 0.5;
    torch::manual_seed(60 + i);
    const auto x = torch::randn({4, 6, kMoeWidth});
    const auto g = torch::randn({4, 6, kMoeWidth});
    std::vector<torch::Tensor> results[2];
    int64_t dropped[2] = {0, 0};
    for (int grouped = 0; grouped < 2; ++grouped) {
      cfg.moe_mlp_impl = grouped ? config::MoeImpl::Sparse : config::MoeImpl::Loop;
      auto mlp = random_moe(cfg, torch::kFloat, 70 + i);
      const auto xi = x.clone().requires_grad_();
      MoeOutput routed;
      {
        std::optional<AutocastGuard> amp;
        if (c.autocast) amp.emplace(torch::kCPU, torch::kBFloat16);
        routed = mlp->route(xi);
      }
      const auto& out = routed.out;
      const auto* stats = &routed;
      EXPECT_EQ(siamese::testing::graph_has_node(out, "GroupedMmBackward0"), grouped && c.inner == 8);
      ((out.to(torch::kFloat) * g).sum() + stats->load_balancing + stats->z_loss).backward();
      dropped[grouped] = stats->dropped.item<int64_t>();
      results[grouped] = {out.to(torch::kFloat),
                          stats->load_balancing,
                          stats->z_loss,
                          xi.grad(),
                          mlp->router->weight.grad(),
                          mlp->expert_ff_proj.grad(),
                          mlp->expert_ff_out.grad()};
    }
    EXPECT_EQ(dropped[0], dropped[1]);
    EXPECT_EQ(dropped[0] > 0, !c.dropless);
    const double tolerance = c.autocast ? 1e-2 : 1e-6;
    for (size_t k = 0; k < results[0].size(); ++k) {
      SCOPED_TRACE("result " + std::to_string(k));
      const double scale = results[0][k].abs().max().item<double>();
      EXPECT_GT(scale, 0.0);
      EXPECT_LE((results[1][k] - results[0][k]).abs().max().item<double>(), tolerance * scale);
    }
  }
}

// One expert chosen with weight 1 computes the dense MLP: a model with such MoE blocks equals
// the dense model with the same weights, whatever the topology around the MLP.
// A sparse MLP attaches its auxiliary losses to its output (aux_loss.h): back-propagating
// the output alone gives the gradient of the output plus the losses at moe_loss_weight and
// moe_zloss_weight over the block count, times the step's scale; the values it reports are
// the losses over the block count, and its routing what it routed. In float64, where the two
// sums of the same products differ by rounding only (a few ulps of the largest term).
TEST(MoeLayer, AttachedLossesGiveTheGradientOfTheWeightedSum) {
  auto cfg = moe_config(4, 2);
  cfg.n_layers = 3;
  cfg.moe_loss_weight = 0.3;
  cfg.moe_zloss_weight = 0.05;
  auto mlp = random_moe(cfg, torch::kDouble, 91);
  const auto x = torch::randn({3, 5, kMoeWidth}, torch::kDouble);
  const auto g = torch::randn({3, 5, kMoeWidth}, torch::kDouble);
  const double scale = 0.25;
  auto grads = [&](bool attached) {
    mlp->zero_grad();
    const auto xi = x.clone().requires_grad_();
    AuxLosses aux(torch::full({}, scale, torch::kDouble));
    if (attached) {
      (mlp->forward(xi, &aux) * g).sum().backward();
    } else {
      const auto r = mlp->route(xi);
      ((r.out * g).sum() + scale * (0.3 * r.load_balancing + 0.05 * r.z_loss) / 3.0).backward();
      aux.values.add(kMoeLoadBalancingLoss, r.load_balancing / 3.0);
      aux.values.add(kMoeZLoss, r.z_loss / 3.0);
    }
    return std::tuple{xi.grad(), mlp->router->weight.grad().clone(), aux};
  };
  const auto [gx, grouter, aux] = grads(true);
  const auto [wx, wrouter, want] = grads(false);
  EXPECT_LT((gx - wx).abs().max().item<double>(), 1e-13);
  EXPECT_LT((grouter - wrouter).abs().max().item<double>(), 1e-13);
  EXPECT_GT(wrouter.abs().max().item<double>(), 0.0);
  for (const char* name : {kMoeLoadBalancingLoss, kMoeZLoss})
    EXPECT_EQ(aux.values[name].item<double>(), want.values[name].item<double>()) << name;
  // Its routing is block 0's row of the counts, every assignment counted once.
  const auto counts = aux.values["moe_expert_tokens"];
  ASSERT_TRUE(counts.defined());
  EXPECT_EQ(counts.sizes(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(counts[0].sum().item<double>(), 15.0 * 2);
  EXPECT_EQ(counts.slice(0, 1).abs().sum().item<double>(), 0.0);
  EXPECT_EQ(aux.values["moe_assignments"].item<double>(), 15.0 * 2);
  // The attachment is what gives the router its share: without a scale nothing is attached.
  mlp->zero_grad();
  const auto xi = x.clone().requires_grad_();
  AuxLosses unscaled;
  (mlp->forward(xi, &unscaled) * g).sum().backward();
  EXPECT_GT((mlp->router->weight.grad() - wrouter).abs().max().item<double>(), 1e-6);
}

TEST(MoeModel, OneExpertOfWeightOneIsTheDenseModelInEveryTopology) {
  for (const auto& name : topology_names()) {
    SCOPED_TRACE(name);
    config::ModelConfig dense = siamese::testing::tiny_model(name, {kMoeWidth, 2, 2, 61, 64, 32});
    dense.include_bias = false;
    config::ModelConfig sparse = dense;
    sparse.block_type = config::BlockType::Moe;
    sparse.moe_num_experts = 1;
    sparse.moe_top_k = 1;
    sparse.moe_norm_topk_prob = true;
    torch::manual_seed(5);
    Transformer a(dense);
    Transformer b(sparse);
    {
      torch::NoGradGuard g;
      auto pb = b->named_parameters();
      for (const auto& p : a->named_parameters()) {
        std::string key = p.key();
        for (const char* w : {"ff_proj", "ff_out"}) {
          const std::string from = std::string(".mlp.") + w + ".weight";
          if (key.size() > from.size() && key.compare(key.size() - from.size(), from.size(), from) == 0) {
            pb[key.substr(0, key.size() - from.size()) + ".mlp.experts." + w][0].copy_(p.value());
            key.clear();
          }
        }
        if (!key.empty()) pb[key].copy_(p.value());
      }
    }
    const auto ids = torch::randint(0, 61, {2, 9}, torch::kLong);
    AuxLosses aux;
    ForwardOptions opts;
    opts.aux = &aux;
    const auto want = a->forward(ids), got = b->forward(ids, opts);
    EXPECT_LT((got - want).abs().max().item<double>(), 1e-5);
    EXPECT_NEAR(aux.values[kMoeLoadBalancingLoss].item<double>(), 1.0, 1e-6);  // one expert: f = P = 1
  }
}

TEST(MoeModel, CountsEveryExpertAndFlopsOnlyTheActiveOnes) {
  for (bool shared : {false, true}) {
    auto cfg = moe_config(6, 2);
    cfg.n_layers = 3;
    cfg.moe_shared_expert = shared;
    Transformer m(cfg);
    int64_t total = 0, mlp = 0;
    for (const auto& p : m->named_parameters()) {
      total += p.value().numel();
      if (p.key().find(".mlp.") != std::string::npos) mlp += p.value().numel();
    }
    const auto counts = count_parameters(cfg);
    EXPECT_EQ(counts.total(), total);
    EXPECT_EQ(counts.mlp, mlp);
    const int64_t expert = 3 * kMoeInner * kMoeWidth, router = 6 * kMoeWidth;
    EXPECT_EQ(counts.mlp_active, cfg.n_layers * (router + (2 + (shared ? 1 : 0)) * expert));
    EXPECT_EQ(counts.total() - counts.active(), cfg.n_layers * 4 * expert);
    auto dense = cfg;
    dense.block_type = config::BlockType::Sequential;
    const double extra = 6.0 * double(cfg.n_layers) * double(router + (1 + (shared ? 1 : 0)) * expert);
    EXPECT_DOUBLE_EQ(flops_per_token(cfg, 32), flops_per_token(dense, 32) + extra);
  }
}

// OLMoE-1B-7B as configs/exps/OLMoE-1B-7B.yaml builds it has the parameters of transformers'
// OlmoeForCausalLM of the same shape (built on the meta device), in total and per token.
TEST(MoeModel, OlmoeOneBSevenBCountsAsTransformersOlmoeForCausalLM) {
  const config::ModelConfig cfg =
      config::load_config(std::string(SIAMESE_SOURCE_DIR) + "/configs/exps/OLMoE-1B-7B.yaml", {}).model;
  siamese::testing::TempDir dir;
  const std::string json = dir.file("olmoe.json");
  std::ofstream(json) << "{\"hidden_size\": " << cfg.d_model
                      << ", \"intermediate_size\": " << mlp_inner_size(cfg)
                      << ", \"num_hidden_layers\": " << cfg.n_layers
                      << ", \"num_attention_heads\": " << cfg.n_heads
                      << ", \"num_key_value_heads\": " << kv_head_count(cfg)
                      << ", \"vocab_size\": " << cfg.embedding_size
                      << ", \"num_experts\": " << cfg.moe_num_experts
                      << ", \"num_experts_per_tok\": " << cfg.moe_top_k
                      << ", \"tie_word_embeddings\": " << (cfg.weight_tying ? "true" : "false") << "}\n";
  const std::string log = dir.file("log");
  ASSERT_EQ(siamese::testing::run_python_reference("tests/model/moe_reference.py", "--count " + json, log), 0)
      << siamese::testing::read_all(log);
  // The counts are the last line (warnings may come before it).
  std::string text = siamese::testing::read_all(log);
  text = text.substr(0, text.find_last_not_of('\n') + 1);
  std::istringstream in(text.substr(text.find_last_of('\n') + 1));
  int64_t total = 0, active = 0;
  ASSERT_TRUE(in >> total >> active) << text;
  const auto counts = count_parameters(cfg);
  EXPECT_EQ(counts.total(), total);
  EXPECT_EQ(counts.active(), active);
  std::cout << "[moe] OLMoE-1B-7B: " << counts.total() << " parameters, " << counts.active() << " active\n";
}

}  // namespace
}  // namespace siamese::model
