// `siamese export` read back by the real transformers package: for every topology a small
// model with perturbed norm and topology weights is saved as a checkpoint, exported, and
// tests/export/hf_parity.py loads the folder with AutoModelForCausalLM (the stock
// LlamaForCausalLM for pre, Olmo2ForCausalLM for reordered, OlmoeForCausalLM for pre with
// OLMoE's sparse blocks, modeling_siamese.py with trust_remote_code otherwise) and compares
// its logits (fp32, CPU) and greedy tokens with the ones computed here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "siamese/common/error.h"
#include "siamese/common/npy.h"
#include "siamese/config/load.h"
#include "siamese/eval/generate.h"
#include "siamese/export/hf_stock.h"
#include "siamese/export/safetensors.h"
#include "siamese/model/accounting.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/save_folder.h"
#include "support/file_size_limit.h"
#include "support/files.h"
#include "support/process.h"
#include "support/run_files.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

using siamese::testing::FileSizeLimit;
using siamese::testing::read_all;
using siamese::testing::run_cli;
using siamese::testing::run_python;
using siamese::testing::TempDir;

namespace siamese {
namespace {

namespace fs = std::filesystem;
config::TrainConfig tiny(const std::string& residual) {
  config::TrainConfig c;
  auto& m = c.model;
  m.d_model = 32;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.n_layers = 3;
  m.mlp_ratio = 4;
  m.rope = true;
  m.include_bias = false;
  m.layer_norm_type = config::LayerNormType::RMS;
  // Both head forms; untied for ngpt, whose OLMo-core reference refuses tied embeddings.
  m.weight_tying = residual != "pre" && residual != "ngpt";
  m.vocab_size = 256;
  m.embedding_size = 256;
  m.max_sequence_length = 32;
  m.eos_token_id = m.pad_token_id = 255;
  m.attention_dropout = m.residual_dropout = m.embedding_dropout = 0.0;
  m.mixln_alpha = 0.34;   // layer 0 Post-Norm, layers 1-2 Pre-Norm
  m.dca_past_layers = 1;  // block 2 and the head read y0 and the last output only
  siamese::testing::set_topology(m, residual);
  c.data.synthetic = config::SyntheticCorpus::Arithmetic;
  c.device = "cpu";
  return c;
}

// A fresh model of `cfg` saved as a checkpoint under `run`, its norm weights and topology
// parameters (hc's dynamic W starts at 0) moved away from their initial values so that
// every one of them matters.
model::Transformer save_run(const config::TrainConfig& cfg, const std::string& run) {
  torch::manual_seed(0);
  model::Transformer m(cfg.model);
  m->eval();
  {
    torch::NoGradGuard g;
    for (auto& p : m->named_parameters())
      if (model::param_kind(p.key()) == model::ParamKind::Norm)
        p.value().copy_(1.0 + 0.3 * torch::randn_like(p.value()));
      else if (p.key().find(".mlp.router.") != std::string::npos)
        p.value().mul_(20.0);  // decisive routing: no near-tie for float rounding to flip
  }
  const auto optim = train::build_optimizer(cfg.optimizer, m->named_parameters());
  train::save_checkpoint(run, *m, *optim, train::TrainState{}, config::to_yaml(cfg));
  return m;
}

// A topology name, "topology:layer_norm_type", or "topology+moe" (OLMoE's sparse blocks: for
// pre with OLMoE's full-width Q/K norms, the stock OlmoeForCausalLM) and "topology+moe_shared"
// (with a shared expert and rescaled top-k weights, which OLMoE has not); "topology~swa" has
// OLMo-3's sliding windows (two layers of window 5, then a full one: reordered's is the stock
// Olmo3ForCausalLM; siamese/reordered's is SiameseNorm on OLMo-3's block).
config::TrainConfig tiny_of(const std::string& spec) {
  const auto colon = spec.find(':'), plus = spec.find('+'), tilde = spec.find('~'), caret = spec.find('^');
  config::TrainConfig cfg = tiny(spec.substr(0, std::min({colon, plus, tilde, caret})));
  if (caret != std::string::npos) {  // completep at twice its base width and depth: every multiplier 1/2
    auto& m = cfg.model;
    m.parametrization = config::Parametrization::CompleteP;
    m.mup.base_d_model = m.d_model / 2;
    m.mup.base_n_heads = m.n_heads;
    m.mup.base_n_layers = m.n_layers / 2;
  }
  if (tilde != std::string::npos) cfg.model.sliding_window_pattern = {5, 5, -1};
  if (colon != std::string::npos)
    cfg.model.layer_norm_type = *config::enum_named<config::LayerNormType>(spec.substr(colon + 1));
  if (plus != std::string::npos) {
    auto& m = cfg.model;
    m.block_type = config::BlockType::Moe;
    m.moe_num_experts = 4;
    m.moe_top_k = 2;
    m.mlp_ratio = 2;
    m.attention_layer_norm = m.residual == "pre";
    m.moe_shared_expert = m.moe_norm_topk_prob = spec.substr(plus + 1) == "moe_shared";
  }
  return cfg;
}

std::vector<std::string> export_cases() {
  std::vector<std::string> cases = model::topology_names();
  for (const char* extra : {"pre:dyt", "hybrid_pre:derf", "pre+moe", "hybrid_pre+moe", "pre+moe_shared",
                            "reordered~swa", "hybrid_pre~swa", "siamese/reordered~swa", "pre^completep"})
    cases.push_back(extra);
  for (const auto& coupling : siamese::testing::kSiameseCouplings) cases.push_back(coupling);
  return cases;
}

// A case's folder name: the spec with its punctuation made underscores.
std::string case_label(std::string spec) {
  for (char& ch : spec)
    if (ch == ':' || ch == '~' || ch == '/' || ch == '+' || ch == '^') ch = '_';
  return spec;
}

// Exports every case through the CLI; one Python process then reads them all, since
// importing transformers costs more than checking a model.
TEST(HfExport, TransformersComputesTheSameLogitsAndGreedyTokensForEveryTopology) {
  TempDir dir;
  std::string cases;
  for (const auto& spec : export_cases()) {
    SCOPED_TRACE(spec);
    const std::string folder = dir.file(case_label(spec));
    const auto cfg = tiny_of(spec);
    auto m = save_run(cfg, folder + "/run");
    torch::manual_seed(1);
    const auto ids = torch::randint(256, {2, 16}, torch::kLong);
    {
      torch::NoGradGuard g;
      write_npy(folder + "/ids.npy", ids);
      write_npy(folder + "/logits.npy", m->forward(ids));
    }
    eval::Sampling s;
    s.max_tokens = 12;
    s.eos = cfg.model.eos_token_id;  // transformers stops there too
    const auto prompt = ids[0].slice(0, 0, 6);
    const auto out = eval::generate(*m, {prompt.data_ptr<int64_t>(), prompt.data_ptr<int64_t>() + 6}, s);
    write_npy(folder + "/greedy.npy", torch::tensor(out, torch::kLong));

    const std::string log = folder + "/export.log";
    ASSERT_EQ(run_cli("export " + folder + "/run --out " + folder + "/hf", log), 0) << read_all(log);
    // pre, reordered, pre+moe and reordered~swa are stock classes (Llama, Olmo2, Olmoe,
    // Olmo3): no remote code.
    const bool stock = spec == "pre" || spec == "reordered" || spec == "pre+moe" || spec == "reordered~swa";
    EXPECT_EQ(fs::exists(folder + "/hf/modeling_siamese.py"), !stock);
    cases += " " + folder;
  }
  const std::string log = dir.file("parity.log");
  const int status =
      run_python(std::string(SIAMESE_SOURCE_DIR) + "/tests/export/hf_parity.py --cases" + cases, log)
          .exit_code;
  const std::string text = read_all(log);
  std::cout << text;
  for (const auto& spec : export_cases())
    EXPECT_NE(text.find("case " + dir.file(case_label(spec)) + ": ok"), std::string::npos)
        << spec << " (its lines are in the output above)";
  EXPECT_EQ(status, 0);
}

// An export of a stock class and of a siamese one, each with OLMo-1B's tokenizer, loaded by
// AutoTokenizer as a user would: transformers' own class, no prompt for remote code, and
// every reference encoding of that tokenizer.json reproduced.
TEST(HfExportTokenizer, AutoTokenizerLoadsTheShippedTokenizerWithoutRemoteCode) {
  TempDir dir;
  const std::string tokenizer = siamese::testing::tokenizer_path("olmo-gpt-neox-20b-pii-special");
  std::string folders;
  for (const std::string residual : {"pre", "hybrid_pre"}) {
    auto cfg = tiny(residual);
    cfg.model.vocab_size = 50280;
    cfg.model.embedding_size = 50304;
    cfg.model.eos_token_id = 50279;
    cfg.model.pad_token_id = 1;
    save_run(cfg, dir.file(residual));
    const std::string log = dir.file(residual + ".log"), out = dir.file(residual + "-hf");
    ASSERT_EQ(run_cli("export " + dir.file(residual) + " --out " + out + " --tokenizer " + tokenizer, log), 0)
        << read_all(log);
    EXPECT_EQ(fs::exists(out + "/modeling_siamese.py"), residual != "pre");
    folders += " " + out;
  }
  const std::string golden = siamese::shared_dir() + "/tokenizers/olmo-gpt-neox-20b-pii-special.golden.jsonl";
  const std::string log = dir.file("tokenizer.log");
  const int status =
      run_python(std::string(SIAMESE_SOURCE_DIR) + "/tests/export/hf_tokenizer.py " + golden + folders, log)
          .exit_code;
  EXPECT_EQ(status, 0) << read_all(log);
  EXPECT_EQ(read_all(log).find("FAILED"), std::string::npos) << read_all(log);
}

// A tokenizer whose ids do not fit the model's vocabulary is refused, and nothing is written.
TEST(HfExportTokenizer, ATokenizerLargerThanTheVocabularyIsRefused) {
  TempDir dir;
  save_run(tiny("pre"), dir.file("run"));
  const std::string log = dir.file("log");
  EXPECT_NE(run_cli("export " + dir.file("run") + " --out " + dir.file("hf") + " --tokenizer " +
                        siamese::testing::tokenizer_path("gpt2"),
                    log),
            0);
  EXPECT_NE(read_all(log).find("ids up to 50256 but the model's vocab_size is 256"), std::string::npos)
      << read_all(log);
  EXPECT_FALSE(fs::exists(dir.file("hf")));
}

std::map<std::string, torch::Tensor> weights(const std::string& run) {
  const auto cfg = config::load_config(train::latest_checkpoint(run)->string() + "/config.yaml", {});
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
  ASSERT_EQ(
      run_cli("export " + dir.file("run") + " --out " + dir.file("hf") + " --max-shard-bytes 40000", log), 0)
      << read_all(log);
  EXPECT_TRUE(fs::exists(dir.file("hf") + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir.file("hf") + "/model.safetensors"));
  EXPECT_EQ(run_python(std::string(SIAMESE_SOURCE_DIR) + "/tests/export/hf_parity.py " + dir.file("hf"), log)
                .exit_code,
            0)
      << read_all(log);
  // The sharded folder imports back, every shard read through the index.
  ASSERT_EQ(run_cli("import " + dir.file("hf") + " --out " + dir.file("back"), log), 0) << read_all(log);
  const auto a = weights(dir.file("run")), b = weights(dir.file("back"));
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
}

// The shipped OLMoE-1B-7B config is a stock OlmoeForCausalLM: the config.json export writes
// for it builds, in transformers, a model of our total and active parameter counts. What
// OLMoE cannot compute is named as the reason for the siamese format instead.
TEST(HfExportOlmoe, ShippedOlmoeOneBSevenBIsTheStockClassAndTheRestIsNamed) {
  const std::string exps = std::string(SIAMESE_SOURCE_DIR) + "/configs/exps/";
  const auto cfg = config::load_config(exps + "OLMoE-1B-7B.yaml", {}).model;
  std::string why;
  const hf::StockClass* cls = hf::stock_class_of(cfg, &why);
  ASSERT_NE(cls, nullptr) << why;
  EXPECT_EQ(cls->architecture, "OlmoeForCausalLM");
  TempDir dir;
  std::ofstream(dir.file("config.json")) << hf::stock_config(*cls, cfg).dump();
  const std::string log = dir.file("log");
  ASSERT_EQ(run_python(std::string(SIAMESE_SOURCE_DIR) + "/tests/model/moe_reference.py --count " +
                           dir.file("config.json"),
                       log)
                .exit_code,
            0)
      << read_all(log);
  std::string text = read_all(log);  // the counts are the last line
  text = text.substr(0, text.find_last_not_of('\n') + 1);
  std::istringstream in(text.substr(text.find_last_of('\n') + 1));
  int64_t total = 0, active = 0;
  ASSERT_TRUE(in >> total >> active) << text;
  EXPECT_EQ(model::count_parameters(cfg).total(), total);
  EXPECT_EQ(model::count_parameters(cfg).active(), active);

  auto shared = cfg, capacity = cfg;
  shared.moe_shared_expert = true;
  capacity.moe_dropless = false;
  const auto hybrid = config::load_config(exps + "OLMoE-1B-7B-hybrid.yaml", {}).model;
  for (const auto& [other, reason] : std::vector<std::pair<config::ModelConfig, std::string>>{
           {shared, "moe_shared_expert"}, {capacity, "moe_dropless"}, {hybrid, "with block_type moe"}}) {
    EXPECT_EQ(hf::stock_class_of(other, &why), nullptr) << reason;
    EXPECT_NE(why.find(reason), std::string::npos) << why;
  }
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
  const auto cfg = tiny_of(GetParam());
  save_run(cfg, dir.file("run"));
  const std::string log = dir.file("log");
  ASSERT_EQ(run_cli("export " + dir.file("run") + " --out " + dir.file("hf"), log), 0) << read_all(log);
  ASSERT_EQ(run_cli("import " + dir.file("hf") + " --out " + dir.file("back"), log), 0) << read_all(log);
  const auto a = weights(dir.file("run")), b = weights(dir.file("back"));
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
  auto back_cfg = config::load_config(dir.file("back") + "/step0/config.yaml", {});
  back_cfg.save_folder = cfg.save_folder;  // the one setting import replaces
  EXPECT_EQ(config::to_yaml(back_cfg), config::to_yaml(cfg));
}

INSTANTIATE_TEST_SUITE_P(LlamaAndSiamese, HfRoundTrip,
                         ::testing::Values("pre", "hybrid_pre", "hc", "ngpt", "mhc", "mhc_lite", "attnres",
                                           "speedrun", "dca", "siamese/deepnorm", "pre+moe", "hybrid_pre+moe",
                                           "reordered~swa", "hybrid_pre~swa"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '/', '_');
                           std::replace(name.begin(), name.end(), '~', '_');
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

// A random stock model made by transformers imports and computes transformers' logits, and
// training on from it starts at transformers' loss on the same batch: the data file holds
// exactly one batch, so the first step's loss (a mean over the batch, whatever its order) is
// that loss.
class HfImportStock : public ::testing::TestWithParam<std::string> {};

TEST_P(HfImportStock, ComputesTheSameLogitsAndTrainsOnFromTheSameLoss) {
  TempDir dir;
  const std::string py = std::string(SIAMESE_SOURCE_DIR) + "/tests/export/", log = dir.file("log");
  ASSERT_EQ(run_python(py + "hf_make_stock.py " + GetParam() + " " + dir.file("hf") + " " +
                           dir.file("ids.npy") + " " + dir.file("logits.npy"),
                       log)
                .exit_code,
            0)
      << read_all(log);
  const std::string made = read_all(log);
  const double hf_loss = std::stod(made.substr(made.rfind("loss ") + 5));
  ASSERT_EQ(run_cli("import " + dir.file("hf") + " --out " + dir.file("run"), log), 0) << read_all(log);
  // The import says what a step of its config's full-scale training defaults costs here.
  EXPECT_NE(read_all(log).find("tokens a step"), std::string::npos) << read_all(log);
  EXPECT_NE(read_all(log).find("a step takes at least"), std::string::npos) << read_all(log);
  const auto cfg = config::load_config(dir.file("run") + "/step0/config.yaml", {});
  EXPECT_EQ(cfg.model.residual, GetParam() == "olmo2" || GetParam() == "olmo3" ? "reordered" : "pre");
  // hf_make_stock.py's Olmo3: a sliding layer of window 8, then a full one.
  const std::vector<int64_t> windows =
      GetParam() == "olmo3" ? std::vector<int64_t>{8, -1} : std::vector<int64_t>{};
  EXPECT_EQ(cfg.model.sliding_window_pattern, windows);
  EXPECT_EQ(cfg.model.block_type,
            GetParam().rfind("olmoe", 0) == 0 ? config::BlockType::Moe : config::BlockType::Sequential);
  model::Transformer m(cfg.model);
  train::load_checkpoint(dir.file("run") + "/step0", *m, nullptr);
  m->eval();
  {
    torch::NoGradGuard g;
    const auto logits = m->forward(read_npy(dir.file("ids.npy")));
    EXPECT_LT((logits - read_npy(dir.file("logits.npy"))).abs().max().item<double>(), 1e-4);
  }
  const std::string train_cmd =
      "train " + dir.file("run") + "/step0/config.yaml --load_path=" + dir.file("run") +
      "/step0 --save_folder=" + dir.file("ft") + " --data.paths=[" + dir.file("ids.tokens") +
      "] --data.memmap_dtype=uint16"
      " --global_train_batch_size=4 --device_train_microbatch_size=4 --max_duration=1 "
      "--optimizer.learning_rate=1e-3"
      " --scheduler.t_warmup=0 --eval_interval=1000 --save_interval=1000 --device=cpu";
  ASSERT_EQ(run_cli(train_cmd, log), 0) << read_all(log);
  const auto losses = siamese::testing::losses(dir.file("ft"));
  ASSERT_EQ(losses.size(), 1u) << read_all(log);
  const double ours = std::stod(losses.begin()->second);
  std::cout << "[import " << GetParam() << "] first training step's loss " << ours << ", transformers' "
            << hf_loss << "\n";
  EXPECT_NEAR(ours, hf_loss, 1e-5) << read_all(log);
}

INSTANTIATE_TEST_SUITE_P(LlamaOlmo2Olmo3AndOlmoe, HfImportStock,
                         ::testing::Values("llama", "olmo2", "olmo3", "olmoe", "olmoe_fused"),
                         [](const auto& info) { return info.param; });

TEST(HfImport, WhatCannotBeRepresentedIsNamed) {
  TempDir dir;
  const std::string py = std::string(SIAMESE_SOURCE_DIR) + "/tests/export/", log = dir.file("log");
  ASSERT_EQ(run_python(py + "hf_make_stock.py llama " + dir.file("llama") + " " + dir.file("ids.npy") + " " +
                           dir.file("logits.npy") + " '{\"attention_bias\": true}'",
                       log)
                .exit_code,
            0)
      << read_all(log);
  EXPECT_NE(run_cli("import " + dir.file("llama") + " --out " + dir.file("run"), log), 0);
  EXPECT_NE(read_all(log).find("attention_bias"), std::string::npos) << read_all(log);
}

// OLMo-core (AllenAI's reference implementation, ai2-olmo-core 3.0.0 in a folder of its own:
// scripts/requirements-olmo-core.txt) builds each topology out of its own block class
// (default, default_scaled, reordered_norm, peri_norm; for ngpt the normalized transformer of
// ngpt_like: normalized block, attention, feed-forward and LM head), copies in the weights of the exported
// folder and must agree with our transformers twin on logits and on the gradient of every
// parameter (tests/export/olmo_core_parity.py). HfExport above ties the twin to this model's
// logits, so the chain C++ == twin == OLMo-core is what the two show together.
TEST(OlmoCoreParity, OlmoCoresBlocksComputeTheSameLogitsAndGradients) {
  TempDir dir;
  std::string pairs;
  for (const std::string topology : {"pre", "lns", "reordered", "peri", "ngpt"}) {
    save_run(tiny(topology), dir.file(topology + "_run"));
    const std::string log = dir.file(topology + "_export.log");
    ASSERT_EQ(run_cli("export " + dir.file(topology + "_run") + " --out " + dir.file(topology + "_hf"), log),
              0)
        << read_all(log);
    pairs += " " + dir.file(topology + "_hf") + " " + topology;
  }
  const std::string log = dir.file("log");
  const int status =
      run_python(std::string(SIAMESE_SOURCE_DIR) + "/tests/export/olmo_core_parity.py" + pairs, log)
          .exit_code;
  const std::string text = read_all(log);
  std::cout << text;
  for (const std::string topology : {"pre", "lns", "reordered", "peri", "ngpt"})
    EXPECT_NE(text.find("case " + topology + ": ok"), std::string::npos) << topology;
  EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace siamese
