// `siamese export` read back by the real transformers package: for every topology a small
// model with perturbed norm and topology weights is saved as a checkpoint, exported, and
// tests/export/hf_parity.py loads the folder with AutoModelForCausalLM (the stock
// LlamaForCausalLM for pre, modeling_siamese.py with trust_remote_code otherwise) and
// compares its logits (fp32, CPU) and greedy tokens with the ones computed here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <sstream>

#include "../tokenizer/temp_dir.h"
#include "siamese/common/npy.h"
#include "siamese/config/load.h"
#include "siamese/eval/generate.h"
#include "siamese/model/registry.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"

namespace siamese {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TrainConfig tiny(const std::string& residual) {
  TrainConfig c;
  auto& m = c.model;
  m.d_model = 32;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.n_layers = 3;
  m.mlp_ratio = 4;
  m.rope = true;
  m.include_bias = false;
  m.layer_norm_type = "rms";
  m.weight_tying = residual != "pre";  // both head forms
  m.vocab_size = 256;
  m.embedding_size = 256;
  m.max_sequence_length = 32;
  m.eos_token_id = m.pad_token_id = 255;
  m.attention_dropout = m.residual_dropout = m.embedding_dropout = 0.0;
  m.residual = residual;
  m.mixln_alpha = 0.34;  // layer 0 Post-Norm, layers 1-2 Pre-Norm
  model::apply_required_settings(m);
  c.data.synthetic = "arithmetic";
  c.device = "cpu";
  return c;
}

// A fresh model of `cfg` saved as a checkpoint under `run`, its norm weights and topology
// parameters (hc's dynamic W starts at 0) moved away from their initial values so that
// every one of them matters.
model::Transformer save_run(const TrainConfig& cfg, const std::string& run) {
  torch::manual_seed(0);
  model::Transformer m(cfg.model);
  m->eval();
  {
    torch::NoGradGuard g;
    for (auto& p : m->named_parameters())
      if (model::param_kind(p.key()) == model::ParamKind::Norm)
        p.value().copy_(1.0 + 0.3 * torch::randn_like(p.value()));
  }
  train::AdamW optim(m->parameters(), torch::optim::AdamWOptions(1e-3));
  train::save_checkpoint(run, *m, optim, train::TrainState{}, to_yaml(cfg));
  return m;
}

class HfExport : public ::testing::TestWithParam<std::string> {};

TEST_P(HfExport, TransformersComputesTheSameLogitsAndGreedyTokens) {
  TempDir dir;
  const auto cfg = tiny(GetParam());
  const auto run = dir.file("run");
  auto m = save_run(cfg, run);

  torch::manual_seed(1);
  const auto ids = torch::randint(256, {2, 16}, torch::kLong);
  {
    torch::NoGradGuard g;
    write_npy(dir.file("ids.npy"), ids);
    write_npy(dir.file("logits.npy"), m->forward(ids));
  }
  eval::Sampling s;
  s.max_tokens = 12;
  s.eos = cfg.model.eos_token_id;  // transformers stops there too
  const auto prompt = ids[0].slice(0, 0, 6);
  const auto out = eval::generate(*m, {prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + 6}, s);
  write_npy(dir.file("greedy.npy"), torch::tensor(out, torch::kLong));

  const std::string log = dir.file("log");
  const std::string export_cmd =
      std::string(SIAMESE_BINARY) + " export " + run + " --out " + dir.file("hf") + " > " + log + " 2>&1";
  ASSERT_EQ(std::system(export_cmd.c_str()), 0) << read_all(log);
  EXPECT_EQ(fs::exists(dir.file("hf") + "/modeling_siamese.py"), GetParam() != "pre");
  const std::string check = std::string(SIAMESE_PYTHON) + " " + SIAMESE_SOURCE_DIR +
                            "/tests/export/hf_parity.py " + dir.file("hf") + " " + dir.file("ids.npy") + " " +
                            dir.file("logits.npy") + " " + dir.file("greedy.npy") + " > " + log + " 2>&1";
  EXPECT_EQ(std::system(check.c_str()), 0) << read_all(log);
}

INSTANTIATE_TEST_SUITE_P(EveryTopology, HfExport, ::testing::ValuesIn(model::topology_names()));

TEST(HfExportShards, LargeModelsAreSplitWithAnIndex) {
  TempDir dir;
  save_run(tiny("pre"), dir.file("run"));
  const std::string log = dir.file("log");
  const std::string cmd = std::string(SIAMESE_BINARY) + " export " + dir.file("run") + " --out " +
                          dir.file("hf") + " --max-shard-bytes 40000 > " + log + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_all(log);
  EXPECT_TRUE(fs::exists(dir.file("hf") + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir.file("hf") + "/model.safetensors"));
  const std::string check = std::string(SIAMESE_PYTHON) + " " + SIAMESE_SOURCE_DIR +
                            "/tests/export/hf_parity.py " + dir.file("hf") + " > " + log + " 2>&1";
  EXPECT_EQ(std::system(check.c_str()), 0) << read_all(log);
}

// Runs `command`, its output into `log`; returns the exit status.
int sh(const std::string& command, const std::string& log) {
  return std::system((command + " > " + log + " 2>&1").c_str());
}

std::map<std::string, torch::Tensor> weights(const std::string& run) {
  const auto cfg = load_config(train::latest_checkpoint(run)->string() + "/config.yaml", {});
  model::Transformer m(cfg.model);
  train::load_checkpoint(*train::latest_checkpoint(run), *m, nullptr);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

class HfRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(HfRoundTrip, ExportThenImportIsBitExact) {
  TempDir dir;
  const auto cfg = tiny(GetParam());
  save_run(cfg, dir.file("run"));
  const std::string bin = SIAMESE_BINARY, log = dir.file("log");
  ASSERT_EQ(sh(bin + " export " + dir.file("run") + " --out " + dir.file("hf"), log), 0) << read_all(log);
  ASSERT_EQ(sh(bin + " import " + dir.file("hf") + " --out " + dir.file("back"), log), 0) << read_all(log);
  const auto a = weights(dir.file("run")), b = weights(dir.file("back"));
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
  auto back_cfg = load_config(dir.file("back") + "/step0/config.yaml", {});
  back_cfg.save_folder = cfg.save_folder;  // the one setting import replaces
  EXPECT_EQ(to_yaml(back_cfg), to_yaml(cfg));
}

INSTANTIATE_TEST_SUITE_P(LlamaAndSiamese, HfRoundTrip, ::testing::Values("pre", "hybrid_pre", "hc"));

TEST(HfImport, StockLlamaFolderComputesTheSameLogits) {
  TempDir dir;
  const std::string py = std::string(SIAMESE_PYTHON) + " " + SIAMESE_SOURCE_DIR + "/tests/export/",
                    bin = SIAMESE_BINARY, log = dir.file("log");
  ASSERT_EQ(sh(py + "hf_make_llama.py " + dir.file("llama") + " " + dir.file("ids.npy") + " " +
                   dir.file("logits.npy"),
               log),
            0)
      << read_all(log);
  ASSERT_EQ(sh(bin + " import " + dir.file("llama") + " --out " + dir.file("run"), log), 0) << read_all(log);
  const auto cfg = load_config(dir.file("run") + "/step0/config.yaml", {});
  model::Transformer m(cfg.model);
  train::load_checkpoint(dir.file("run") + "/step0", *m, nullptr);
  m->eval();
  torch::NoGradGuard g;
  const auto logits = m->forward(read_npy(dir.file("ids.npy")));
  EXPECT_LT((logits - read_npy(dir.file("logits.npy"))).abs().max().item<double>(), 1e-4);
}

TEST(HfImport, WhatCannotBeRepresentedIsNamed) {
  TempDir dir;
  const std::string py = std::string(SIAMESE_PYTHON) + " " + SIAMESE_SOURCE_DIR + "/tests/export/",
                    bin = SIAMESE_BINARY, log = dir.file("log");
  ASSERT_EQ(sh(py + "hf_make_llama.py " + dir.file("llama") + " " + dir.file("ids.npy") + " " +
                   dir.file("logits.npy") + " '{\"attention_bias\": true}'",
               log),
            0)
      << read_all(log);
  EXPECT_NE(sh(bin + " import " + dir.file("llama") + " --out " + dir.file("run"), log), 0);
  EXPECT_NE(read_all(log).find("attention_bias"), std::string::npos) << read_all(log);
}

}  // namespace
}  // namespace siamese
