// Muon (train/muon.h) and the optimizer that pairs it with AdamW, against torch 2.11's
// torch.optim.Muon and torch.optim.AdamW (tests/train/muon_reference.py): the parameters of
// a tiny model and the same gradients for 10 steps through a learning-rate schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "siamese/common/npy.h"
#include "siamese/model/transformer.h"
#include "siamese/train/optimizer.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::train {
namespace {

constexpr int kMuonSteps = 10;

// Untied, with biases: the head and the biases stay with AdamW; att_proj [3d, d] and ff_proj
// [2h, d] are tall, ff_out [d, h] wide, so both orientations of Newton-Schulz run.
config::ModelConfig muon_test_model() {
  auto c = testing::tiny_model("pre", {16, 2, 2, 61, 64, 8});
  c.weight_tying = false;
  c.include_bias = true;
  return c;
}

// block_type moe: Muon also takes the routers [E, d] and the stacked experts, ff_proj
// [E, 2h, d] tall and ff_out [E, d, h] wide per expert.
config::ModelConfig muon_moe_test_model() {
  auto c = muon_test_model();
  c.include_bias = false;
  c.block_type = config::BlockType::Moe;
  c.moe_num_experts = 3;
  c.moe_top_k = 2;
  return c;
}

config::OptimizerConfig muon_config() {
  config::OptimizerConfig c;
  c.name = config::OptimizerName::Muon;
  c.learning_rate = 1e-2;
  c.weight_decay = 0.1;
  return c;
}

// The largest |ours - torch| of each parameter after kMuonSteps steps of `cfg`, Muon's
// matrices and AdamW's parameters apart. Odd steps pass a zero skip flag, the path training
// takes; even steps none.
struct MuonDifferences {
  std::map<std::string, double> muon, adamw;
};

MuonDifferences muon_differences_from_torch(const config::OptimizerConfig& cfg,
                                            const config::ModelConfig& model_cfg = muon_test_model()) {
  testing::TempDir dir;
  torch::manual_seed(3);
  model::Transformer m(model_cfg);
  const auto params = m->named_parameters();
  auto opt = build_optimizer(cfg, params);
  std::map<const c10::TensorImpl*, std::string> name_of;
  std::filesystem::create_directories(dir.path() / "init");
  for (const auto& kv : params) {
    name_of[kv.value().unsafeGetTensorImpl()] = kv.key();
    write_npy(dir.file("init/" + kv.key() + ".npy"), kv.value().detach());
  }
  std::vector<double> muon_lrs;
  std::vector<std::vector<double>> adamw_lrs(opt->adamw().param_groups().size());
  for (int step = 0; step < kMuonSteps; ++step) {
    const double lr = cfg.learning_rate * (1 - 0.07 * step);
    opt->set_learning_rate(lr);
    for (size_t i = 0; i < adamw_lrs.size(); ++i)
      adamw_lrs[i].push_back(opt->adamw().param_groups()[i].options().get_lr());
    muon_lrs.push_back(opt->muon()->options().lr);
    EXPECT_DOUBLE_EQ(muon_lrs.back(), cfg.muon.learning_rate.value_or(cfg.learning_rate) * (1 - 0.07 * step));
    torch::manual_seed(100 + step);
    std::filesystem::create_directories(dir.path() / std::to_string(step));
    for (const auto& kv : params) {
      kv.value().mutable_grad() = torch::randn(kv.value().sizes()) * (1 + step % 3);
      write_npy(dir.file(std::to_string(step) + "/" + kv.key() + ".npy"), kv.value().grad());
    }
    if (step % 2)
      opt->update(torch::zeros({}));
    else
      opt->update();
  }
  nlohmann::json groups = nlohmann::json::array();
  auto names = [&](const std::vector<torch::Tensor>& tensors) {
    std::vector<std::string> out;
    for (const auto& t : tensors) out.push_back(name_of.at(t.unsafeGetTensorImpl()));
    return out;
  };
  const MuonOptions& mo = opt->muon()->options();
  groups.push_back({{"kind", "muon"},
                    {"names", names(opt->muon()->params())},
                    {"lrs", muon_lrs},
                    {"weight_decay", mo.weight_decay},
                    {"momentum", mo.momentum},
                    {"nesterov", mo.nesterov},
                    {"ns_steps", mo.ns_steps},
                    {"adjust_lr_fn", config::name_of(mo.adjust_lr)}});
  for (size_t i = 0; i < adamw_lrs.size(); ++i) {
    auto& g = opt->adamw().param_groups()[i];
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(g.options());
    groups.push_back({{"kind", "adamw"},
                      {"names", names(g.params())},
                      {"lrs", adamw_lrs[i]},
                      {"weight_decay", o.weight_decay()},
                      {"betas", {std::get<0>(o.betas()), std::get<1>(o.betas())}},
                      {"eps", o.eps()}});
  }
  dir.write("spec.json", nlohmann::json{{"steps", kMuonSteps}, {"groups", groups}}.dump());
  const int status = testing::run_python(std::string(SIAMESE_SOURCE_DIR) + "/tests/train/muon_reference.py " +
                                             dir.path().string(),
                                         dir.file("log"))
                         .exit_code;
  EXPECT_EQ(status, 0) << testing::read_all(dir.file("log"));
  MuonDifferences diffs;
  if (status != 0) return diffs;
  for (const auto& kv : params) {
    const auto theirs = read_npy(dir.file("out/" + kv.key() + ".npy"));
    (opt->muon()->owns(kv.value()) ? diffs.muon : diffs.adamw)[kv.key()] =
        (kv.value().detach() - theirs).abs().max().item<double>();
  }
  return diffs;
}

void expect_matches_torch(const config::OptimizerConfig& cfg, const std::string& label,
                          const config::ModelConfig& model_cfg = muon_test_model()) {
  const MuonDifferences diffs = muon_differences_from_torch(cfg, model_cfg);
  ASSERT_FALSE(diffs.muon.empty());
  ASSERT_FALSE(diffs.adamw.empty());
  double muon_max = 0, adamw_max = 0;
  for (const auto& [name, diff] : diffs.muon) {
    EXPECT_LE(diff, 1e-6) << name;
    muon_max = std::max(muon_max, diff);
  }
  for (const auto& [name, diff] : diffs.adamw) {
    EXPECT_EQ(diff, 0) << name << ": the same fused kernel as torch.optim.AdamW(fused=True)";
    adamw_max = std::max(adamw_max, diff);
  }
  std::cout << "[" << label << "] max |ours - torch.optim| after " << kMuonSteps
            << " steps: " << diffs.muon.size() << " Muon matrices " << muon_max << ", " << diffs.adamw.size()
            << " AdamW parameters " << adamw_max << "\n";
}

// Nesterov momentum, match_rms_adamw, a Muon learning rate of its own that the schedule scales
// like AdamW's, and weight decay in both.
TEST(Muon, MatchesTorchMuonAndAdamWWithItsDefaults) {
  auto cfg = muon_config();
  cfg.muon.learning_rate = 2e-2;
  expect_matches_torch(cfg, "muon defaults");
}

// optimizer.group_overrides and the topology's group: AdamW groups of their own learning
// rates (the schedule's fraction of each peak), weight decays, betas and epsilons, each the
// update torch.optim.AdamW makes with those settings.
TEST(Muon, MatchesTorchWithGroupOverrides) {
  auto cfg = muon_config();
  cfg.topology_lr_multiplier = 0.5;
  config::GroupOverrideConfig embed, biases;
  embed.params = {"wte.weight"};
  embed.lr = 3e-3;
  biases.params = {"blocks.*.bias", "topology.*.bias"};
  biases.weight_decay = 0.05;
  biases.betas = {0.8, 0.99};
  biases.eps = 1e-7;
  cfg.group_overrides = {embed, biases};
  auto model_cfg = muon_test_model();
  model_cfg.residual = "hybrid_pre";  // SiameseNorm's c1 gains: the topology's group
  model::apply_required_settings(model_cfg);
  model::Transformer m(model_cfg);
  const auto g = param_groups(cfg, m->named_parameters());
  ASSERT_EQ(g.names("group_overrides[0]"), std::vector<std::string>{"wte.weight"});
  ASSERT_FALSE(g.names("group_overrides[1]").empty());
  ASSERT_FALSE(g.names("topology").empty());
  expect_matches_torch(cfg, "muon, AdamW group overrides", model_cfg);
  // The override's peak is its own, scaled by the schedule's fraction.
  auto opt = build_optimizer(cfg, m->named_parameters());
  opt->set_learning_rate(cfg.learning_rate * 0.3);
  const auto wte = m->named_parameters()["wte.weight"];
  for (auto& group : opt->adamw().param_groups())
    if (group.params()[0].is_same(wte)) {
      EXPECT_DOUBLE_EQ(group.options().get_lr(), 3e-3 * 0.3);
    }
}

TEST(Muon, MatchesTorchMuonWithOriginalAdjustmentAndPlainMomentum) {
  auto cfg = muon_config();
  cfg.muon.adjust_lr = config::MuonLrAdjust::Original;
  cfg.muon.nesterov = false;
  cfg.muon.momentum = 0.9;
  cfg.muon.ns_steps = 3;
  cfg.muon.weight_decay = 0.0;
  expect_matches_torch(cfg, "muon original, no nesterov, 3 NS steps");
}

// Each expert of a stack is a matrix of its own: torch.optim.Muon is given the experts one
// parameter per matrix (muon_reference.py splits the stacks and stacks the results back).
TEST(Muon, OrthogonalisesEachExpertOfAStackAsTorchMuonDoesEachMatrix) {
  auto cfg = muon_config();
  expect_matches_torch(cfg, "muon, MoE experts", muon_moe_test_model());
  cfg.muon.adjust_lr = config::MuonLrAdjust::Original;
  expect_matches_torch(cfg, "muon original, MoE experts", muon_moe_test_model());
  model::Transformer m(muon_moe_test_model());
  const auto muon = param_groups(cfg, m->named_parameters()).names("muon");
  for (const char* name :
       {"blocks.0.mlp.experts.ff_proj", "blocks.0.mlp.experts.ff_out", "blocks.1.mlp.router.weight"})
    EXPECT_NE(std::find(muon.begin(), muon.end(), name), muon.end()) << name;
}

// Muon's matrices are the blocks' attention and MLP weights; embeddings, the untied head,
// norms and biases stay with AdamW's OLMo groups.
TEST(Muon, TakesTheHiddenMatricesAndLeavesTheRestToAdamW) {
  model::Transformer m(muon_test_model());
  const auto g = param_groups(muon_config(), m->named_parameters());
  const std::vector<std::string> expected = {"blocks.0.attn.att_proj.weight", "blocks.0.attn.attn_out.weight",
                                             "blocks.0.mlp.ff_out.weight",    "blocks.0.mlp.ff_proj.weight",
                                             "blocks.1.attn.att_proj.weight", "blocks.1.attn.attn_out.weight",
                                             "blocks.1.mlp.ff_out.weight",    "blocks.1.mlp.ff_proj.weight"};
  EXPECT_EQ(g.names("muon"), expected);
  EXPECT_EQ(g.names("decay"), std::vector<std::string>{"ff_out.weight"});  // the head
  std::vector<std::string> others = {"ff_out.bias", "topology.ln_f.bias", "topology.ln_f.weight",
                                     "wpe.weight", "wte.weight"};
  for (const char* layer : {"blocks.0.", "blocks.1."})
    for (const char* local :
         {"attn.att_proj.bias", "attn.attn_out.bias", "mlp.ff_out.bias", "mlp.ff_proj.bias"})
      others.push_back(std::string(layer) + local);
  for (const char* layer : {"topology.blocks.0.", "topology.blocks.1."})
    for (const char* local : {"attn_norm.bias", "attn_norm.weight", "ff_norm.bias", "ff_norm.weight"})
      others.push_back(std::string(layer) + local);
  std::sort(others.begin(), others.end());
  EXPECT_EQ(g.names("no_decay"), others);
}

// A skipped step (non-finite loss or gradient) changes neither weights nor momentum.
TEST(Muon, SkipFlagCancelsTheUpdateAndTheMomentum) {
  torch::manual_seed(4);
  auto w = torch::randn({6, 4}).requires_grad_(), reference = w.detach().clone().requires_grad_();
  Muon skipped({w}, {}), plain({reference}, {});
  for (int step = 0; step < 3; ++step) {
    const auto g = torch::randn({6, 4});
    w.mutable_grad() = g.clone();
    reference.mutable_grad() = g.clone();
    skipped.update(torch::zeros({}));
    plain.update();
    if (step == 1) {
      w.mutable_grad() = torch::full({6, 4}, std::numeric_limits<float>::quiet_NaN());
      skipped.update(torch::ones({}));
    }
  }
  EXPECT_TRUE(torch::equal(w, reference));
  EXPECT_TRUE(torch::equal(skipped.momentum_buffer(w), plain.momentum_buffer(reference)));
}

// On CUDA the Newton-Schulz matmuls run in cuBLAS's bfloat16, so the updates agree with the
// CPU's to bfloat16's precision, not bit for bit; the skip flag stays on the device.
TEST(GpuMuon, CudaMatchesTheCpuPathAndSkipsOnTheDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(8);
  std::vector<torch::Tensor> start = {torch::randn({64, 32}), torch::randn({32, 96})}, cpu, gpu;
  for (const auto& w : start) {
    cpu.push_back(w.clone().requires_grad_());
    gpu.push_back(w.cuda().requires_grad_());
  }
  MuonOptions o;
  o.lr = 1e-2;
  o.adjust_lr = config::MuonLrAdjust::MatchRmsAdamW;
  Muon on_cpu(cpu, o), on_gpu(gpu, o);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < start.size(); ++i) {
      const auto g = torch::randn(start[i].sizes());
      cpu[i].mutable_grad() = g;
      gpu[i].mutable_grad() = g.cuda();
    }
    on_cpu.update(torch::zeros({}));
    on_gpu.update(torch::zeros({}, torch::kCUDA));
    if (step == 2) {
      std::vector<torch::Tensor> before;
      for (auto& w : gpu) {
        before.push_back(w.detach().clone());
        w.mutable_grad() = torch::full_like(w, std::numeric_limits<float>::quiet_NaN());
      }
      on_gpu.update(torch::ones({}, torch::kCUDA));
      for (size_t i = 0; i < gpu.size(); ++i) EXPECT_TRUE(torch::equal(gpu[i], before[i])) << "matrix " << i;
    }
  }
  for (size_t i = 0; i < start.size(); ++i) {
    const auto moved_cpu = cpu[i].detach() - start[i], moved_gpu = gpu[i].detach().cpu() - start[i];
    EXPECT_LT(((moved_gpu - moved_cpu).norm() / moved_cpu.norm()).item<double>(), 2e-2) << "matrix " << i;
  }
}

}  // namespace
}  // namespace siamese::train
