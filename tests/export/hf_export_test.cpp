// `siamese export` read back by the real transformers package: for every topology a small
// model with perturbed norm and topology weights is saved as a checkpoint, exported, and
// tests/export/hf_parity.py loads the folder with AutoModelForCausalLM (the stock
// LlamaForCausalLM for pre, modeling_siamese.py with trust_remote_code otherwise) and
// compares its logits (fp32, CPU) and greedy tokens with the ones computed here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "siamese/common/error.h"
#include "siamese/common/npy.h"
#include "siamese/config/load.h"
#include "siamese/eval/generate.h"
#include "siamese/export/safetensors.h"
#include "siamese/model/accounting.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/save_folder.h"
#include "support/cli.h"
#include "support/file_size_limit.h"
#include "support/temp_dir.h"

using siamese::testing::FileSizeLimit;
using siamese::testing::read_all;
using siamese::testing::sh;
using siamese::testing::TempDir;

namespace siamese {
namespace {

namespace fs = std::filesystem;
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

std::map<std::string, torch::Tensor> weights(const std::string& run) {
  const auto cfg = load_config(train::latest_checkpoint(run)->string() + "/config.yaml", {});
  model::Transformer m(cfg.model);
  train::load_checkpoint(*train::latest_checkpoint(run), *m, nullptr);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

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
  // The sharded folder imports back, every shard read through the index.
  ASSERT_EQ(sh(std::string(SIAMESE_BINARY) + " import " + dir.file("hf") + " --out " + dir.file("back"), log),
            0)
      << read_all(log);
  const auto a = weights(dir.file("run")), b = weights(dir.file("back"));
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
}

TEST(Safetensors, AFullDiskKeepsTheEarlierFileWhole) {
  TempDir dir;
  const fs::path path = dir.file("model.safetensors");
  hf::write_safetensors(path, {{"a", torch::arange(4, torch::kFloat32)}});
  const std::string before = read_all(path);
  std::string message;
  {
    FileSizeLimit limit(1024);
    try {
      hf::write_safetensors(path, {{"a", torch::zeros({4096}, torch::kFloat32)}});
    } catch (const Error& e) {
      message = e.what();
    }
  }
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_EQ(read_all(path), before);
  EXPECT_EQ(dir.count(), 1);
  EXPECT_TRUE(torch::equal(hf::read_safetensors(path).at("a"), torch::arange(4, torch::kFloat32)));
}

TEST(Safetensors, DamagedFilesAreRefusedBeforeAnyAllocation) {
  TempDir dir;
  const fs::path path = dir.file("model.safetensors");
  hf::write_safetensors(path, {{"w", torch::ones({2, 3}, torch::kFloat32)}});
  const std::string good = read_all(path);
  uint64_t header_length = 0;
  std::memcpy(&header_length, good.data(), 8);
  const std::string header = good.substr(8, header_length), data = good.substr(8 + header_length);
  auto with_header = [&](std::string h) {
    while (h.size() % 8) h += ' ';
    const uint64_t n = h.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + h + data;
  };
  auto error_of = [&](const std::string& bytes) {
    testing::write_file(path, bytes);
    try {
      hf::read_safetensors(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string huge_length = std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8) + header + data;
  const std::string cases[] = {
      huge_length,
      good.substr(0, good.size() - 4),  // cut short
      with_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [1099511627776, 4], \"data_offsets\": [0, 24]}}"),
      with_header("{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 4096]}}"),
      with_header("{\"w\": {\"dtype\": \"I64\", \"shape\": [3], \"data_offsets\": [0, 24]}}"),
      with_header("{\"w\": [1, 2]"),
  };
  for (const auto& bytes : cases) {
    const std::string message = error_of(bytes);
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find("fix:"), std::string::npos) << message;
  }
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
