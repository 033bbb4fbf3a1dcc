// optimizer.group_overrides and the topology's group (train/optimizer.h): the parameters each
// override takes against OLMo-core's own build_groups (tests/train/olmo_core_groups.py), the
// settings the update runs with, the refusals, and a run whose frozen embedding stays put.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint_model.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/trainer.h"
#include "support/process.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

config::ModelConfig biased_model() {
  auto c = testing::tiny_model("hybrid_pre", {16, 2, 2, 61, 64, 8});
  c.include_bias = true;
  c.weight_tying = false;
  return c;
}

config::GroupOverrideConfig override_of(std::vector<std::string> params) {
  config::GroupOverrideConfig o;
  o.params = std::move(params);
  return o;
}

// OLMo-core's groups for the model's names and `overrides`: {"groups": ...} or {"error": ...}.
json olmo_core_groups(const torch::OrderedDict<std::string, torch::Tensor>& params,
                      const std::vector<json>& overrides) {
  testing::TempDir dir;
  json spec = {{"names", json::array()}, {"overrides", overrides}};
  for (const auto& kv : params) spec["names"].push_back(kv.key());
  std::ofstream(dir.file("spec.json")) << spec.dump();
  const auto outcome =
      testing::run_python(std::string(SIAMESE_SOURCE_DIR) + "/tests/train/olmo_core_groups.py " +
                              dir.file("spec.json") + " " + dir.file("out.json"),
                          dir.file("log"));
  EXPECT_EQ(outcome.exit_code, 0) << testing::read_all(dir.file("log"));
  return json::parse(std::ifstream(dir.file("out.json")));
}

std::string refusal(const config::OptimizerConfig& cfg, const model::Transformer& m) {
  try {
    param_groups(cfg, m->named_parameters());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// Each override takes exactly the parameters OLMo-core's fnmatch globs give its group (the
// same names, * matching dots too), with the options it names; what no override takes keeps
// its OLMo group, and the topology's own tensors (hybrid_pre's c1) form their own.
TEST(GroupOverrides, TakeTheParametersOlmoCoresGlobsGiveThem) {
  torch::manual_seed(1);
  model::Transformer m(biased_model());
  const auto params = m->named_parameters();
  config::OptimizerConfig cfg;
  cfg.learning_rate = 1e-2;
  auto embed = override_of({"wte.weight", "wpe.*"});
  embed.lr = 3e-3;
  embed.weight_decay = 0.0;
  auto biases = override_of({"blocks.*.attn.*bias", "topology.blocks.?.c1"});
  biases.betas = {0.8, 0.9};
  biases.eps = 1e-10;
  cfg.group_overrides = {embed, biases};
  const std::vector<json> theirs_spec = {
      {{"params", embed.params}, {"opts", {{"lr", 3e-3}, {"weight_decay", 0.0}}}},
      {{"params", biases.params}, {"opts", {{"betas", {0.8, 0.9}}, {"eps", 1e-10}}}}};
  const json theirs = olmo_core_groups(params, theirs_spec);
  ASSERT_TRUE(theirs.contains("groups")) << theirs.dump();
  ASSERT_EQ(theirs["groups"].size(), 3u) << theirs.dump();  // the two overrides, then the rest

  const ParamGroups ours = param_groups(cfg, params);
  std::set<std::string> overridden;
  for (size_t i = 0; i < 2; ++i) {
    auto want = theirs["groups"][i]["params"].get<std::vector<std::string>>();
    std::sort(want.begin(), want.end());
    EXPECT_EQ(ours.names("group_overrides[" + std::to_string(i) + "]"), want) << "override " << i;
    overridden.insert(want.begin(), want.end());
  }
  std::vector<std::string> rest;
  for (const auto& g : ours.groups)
    if (g.label.rfind("group_overrides", 0) != 0) rest.insert(rest.end(), g.names.begin(), g.names.end());
  std::sort(rest.begin(), rest.end());
  auto their_rest = theirs["groups"][2]["params"].get<std::vector<std::string>>();
  std::sort(their_rest.begin(), their_rest.end());
  EXPECT_EQ(rest, their_rest);

  for (const auto& g : ours.groups) {
    SCOPED_TRACE(g.label);
    if (g.label == "group_overrides[0]") {
      EXPECT_DOUBLE_EQ(cfg.learning_rate * g.lr_ratio, 3e-3);
      EXPECT_EQ(g.weight_decay, 0.0);
    } else if (g.label == "group_overrides[1]") {
      EXPECT_EQ(g.beta1, 0.8);
      EXPECT_EQ(g.beta2, 0.9);
      EXPECT_EQ(g.eps, 1e-10);
      EXPECT_EQ(g.lr_ratio, 1.0);
    } else if (g.label == "topology") {
      // c1 went to the override; hybrid_pre's other topology tensors are norms.
      ADD_FAILURE() << "every topology tensor of hybrid_pre is c1, which the override took";
    }
  }
  // Weight decay an override leaves unset stays each parameter's own: the override's biases
  // are not decayed, its c1 gains neither, so it is one group.
  EXPECT_EQ(std::count_if(ours.groups.begin(), ours.groups.end(),
                          [](const ParamGroup& g) { return g.label == "group_overrides[1]"; }),
            1);

  // A glob that matches nothing: OLMo-core refuses it, and so do we, naming the entry.
  const json none = olmo_core_groups(params, {{{"params", {"blocks.*.no_such"}}, {"opts", json::object()}}});
  EXPECT_TRUE(none.contains("error")) << none.dump();
  config::OptimizerConfig unmatched;
  unmatched.group_overrides = {override_of({"blocks.*.no_such"})};
  const std::string why = refusal(unmatched, m);
  EXPECT_NE(why.find("'blocks.*.no_such' matches no parameter"), std::string::npos) << why;
  EXPECT_NE(why.find("optimizer.group_overrides[0].params"), std::string::npos) << why;
}

// Without overrides, the topology's own tensors are a group of their own with
// topology_lr_multiplier and topology_weight_decay; its norms stay in OLMo's groups.
TEST(GroupOverrides, TheTopologysTensorsAreAGroupOfTheirOwn) {
  model::Transformer m(biased_model());
  config::OptimizerConfig cfg;
  cfg.topology_lr_multiplier = 0.25;
  cfg.decay_norm_and_bias = true;
  const ParamGroups g = param_groups(cfg, m->named_parameters());
  EXPECT_EQ(g.names("topology"), (std::vector<std::string>{"topology.blocks.0.c1", "topology.blocks.1.c1"}));
  for (const auto& group : g.groups)
    if (group.label == "topology") {
      EXPECT_EQ(group.lr_ratio, 0.25);
      EXPECT_EQ(group.weight_decay, 0.0);  // not decayed even with decay_norm_and_bias
    }
  const auto decayed = g.names("decay");
  EXPECT_TRUE(std::any_of(decayed.begin(), decayed.end(), [](const std::string& n) {
    return n.rfind("topology.", 0) == 0 && n.find("norm") != std::string::npos;
  })) << "the topology's norms decay with decay_norm_and_bias";
  // The schedule scales every group alike.
  auto opt = build_optimizer(cfg, m->named_parameters());
  opt->set_learning_rate(cfg.learning_rate * 0.5);
  for (auto& group : opt->adamw().param_groups()) {
    const bool topology = group.params().size() == 2 && group.params()[0].dim() == 1 &&
                          group.params()[0].is_same(m->named_parameters()["topology.blocks.0.c1"]);
    EXPECT_DOUBLE_EQ(group.options().get_lr(), cfg.learning_rate * 0.5 * (topology ? 0.25 : 1.0));
  }
}

// A parameter two overrides name, and Muon's matrices, are refused by name.
TEST(GroupOverrides, OverlapsAndMuonsMatricesAreRefused) {
  model::Transformer m(biased_model());
  config::OptimizerConfig twice;
  twice.group_overrides = {override_of({"wte.*"}), override_of({"w?e.weight"})};
  const std::string overlap = refusal(twice, m);
  EXPECT_NE(overlap.find("wte.weight is matched by optimizer.group_overrides[0] and [1]"), std::string::npos)
      << overlap;
  config::OptimizerConfig muon;
  muon.name = config::OptimizerName::Muon;
  muon.group_overrides = {override_of({"blocks.0.*"})};
  const std::string matrix = refusal(muon, m);
  EXPECT_NE(matrix.find("one of Muon's matrices"), std::string::npos) << matrix;
  EXPECT_NE(matrix.find("optimizer.muon"), std::string::npos) << matrix;
  muon.group_overrides = {override_of({"blocks.0.*bias"})};
  EXPECT_EQ(refusal(muon, m), "");
}

// The YAML form is OLMo-core's (params, opts), located by line when wrong, and a run's
// config.yaml gives back the same overrides.
TEST(GroupOverrides, ReadFromOlmoCoresYamlFormAndWrittenBack) {
  const std::string text =
      "model: {d_model: 16, n_heads: 2, n_layers: 1, vocab_size: 64, embedding_size: 64,\n"
      "        max_sequence_length: 8, eos_token_id: 0, pad_token_id: 1}\n"
      "optimizer:\n"
      "  learning_rate: 0.01\n"
      "  group_overrides:\n"
      "    - params: [wte.weight]\n"
      "      opts: {lr: 0.003, weight_decay: 0.0}\n"
      "    - params: [\"blocks.*.bias\"]\n"
      "      opts: {betas: [0.8, 0.9], lr_multiplier: 0.5}\n";
  const config::TrainConfig c = config::load_config_text(text, "overrides.yaml");
  ASSERT_EQ(c.optimizer.group_overrides.size(), 2u);
  EXPECT_EQ(c.optimizer.group_overrides[0].params, std::vector<std::string>{"wte.weight"});
  EXPECT_EQ(c.optimizer.group_overrides[0].lr, 0.003);
  EXPECT_EQ(c.optimizer.group_overrides[0].weight_decay, 0.0);
  EXPECT_EQ(c.optimizer.group_overrides[1].betas, (std::vector<double>{0.8, 0.9}));
  EXPECT_EQ(c.optimizer.group_overrides[1].lr_multiplier, 0.5);
  const config::TrainConfig again = config::load_config_text(config::to_yaml(c), "config.yaml");
  EXPECT_EQ(config::to_yaml(again), config::to_yaml(c));
  EXPECT_EQ(again.optimizer.group_overrides[1].lr_multiplier, 0.5);

  const auto refused = [&](const std::string& bad) -> std::string {
    try {
      config::load_config_text(bad, "bad.yaml");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string both = refused(
      "optimizer:\n  group_overrides:\n    - params: [wte.weight]\n      opts: {lr: 0.1, lr_multiplier: "
      "2}\n");
  EXPECT_NE(both.find("opts.lr and opts.lr_multiplier are both set"), std::string::npos) << both;
  EXPECT_NE(both.find("bad.yaml:4"), std::string::npos) << both;
  const std::string misspelt = refused(
      "optimizer:\n  group_overrides:\n    - params: [wte.weight]\n      opts: {learning_rate: 0.1}\n");
  EXPECT_NE(misspelt.find("unknown key optimizer.group_overrides[0].opts.learning_rate"), std::string::npos)
      << misspelt;
  EXPECT_NE(misspelt.find("bad.yaml:4"), std::string::npos) << misspelt;
}

// A training run with the embedding's learning rate at 0: its embedding leaves the run as it
// was initialised while every other weight moved, run.json records the groups, and the log
// names them.
TEST(GroupOverrides, AZeroLearningRateKeepsItsParametersWhereTheyStarted) {
  testing::TempDir dir;
  config::TrainConfig c = testing::tiny(dir.path() / "run");
  c.max_duration = "4";
  c.save_interval = 4;
  auto frozen = override_of({"wte.weight"});
  frozen.lr = 0.0;
  c.optimizer.group_overrides = {frozen};
  ASSERT_EQ(train::train(c), 0);
  torch::manual_seed(c.seed);
  model::Transformer init(c.model);
  const auto trained = load_checkpoint_model((dir.path() / "run").string(), torch::kCPU);
  ASSERT_EQ(trained.step, 4);
  const auto before = init->named_parameters();
  for (const auto& kv : trained.model->named_parameters()) {
    const bool same = torch::equal(kv.value(), before[kv.key()]);
    if (kv.key() == "wte.weight") {
      EXPECT_TRUE(same) << kv.key();
    } else if (kv.value().requires_grad() && kv.key().find("norm") == std::string::npos) {
      EXPECT_FALSE(same) << kv.key() << " did not train";
    }
  }
  const json run = json::parse(std::ifstream(dir.path() / "run" / "run.json"));
  ASSERT_TRUE(run.contains("param_groups")) << run.dump();
  bool found = false;
  for (const auto& g : run["param_groups"])
    if (g["label"] == "group_overrides[0]") {
      found = true;
      EXPECT_EQ(g["params"], json::array({"wte.weight"}));
      EXPECT_EQ(g["lr"], 0.0);
    }
  EXPECT_TRUE(found) << run["param_groups"].dump();
}

}  // namespace siamese::train
