// `siamese import HF_DIR --out RUN_FOLDER`: a Hugging Face model folder as a siamese
// checkpoint (RUN_FOLDER/step0) to continue training or fine-tune from. Reads folders that
// `siamese export` wrote (bit-exact round trip: their config.json carries the run config)
// and stock LlamaForCausalLM folders (a Pre-Norm RMSNorm/SwiGLU/RoPE model). Anything the
// project cannot represent is an error naming the config key or tensor.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "commands.h"
#include "hf_llama.h"
#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/model/registry.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"

namespace siamese::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read", path.string(), "pass a Hugging Face model folder");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(std::string("not valid JSON: ") + e.what(), path.string());
  }
}

// Every tensor of one safetensors file, as float32 / bfloat16 / float16 CPU tensors.
void read_safetensors(const fs::path& path, std::map<std::string, torch::Tensor>& out) {
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  if (!f.read(reinterpret_cast<char*>(&n), 8) || n > (uint64_t(1) << 30))
    throw Error("not a safetensors file", path.string());
  std::string text(n, '\0');
  f.read(text.data(), std::streamsize(n));
  const auto header = json::parse(text);
  const std::streamoff data_start = std::streamoff(8 + n);
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string dtype = info.at("dtype");
    const auto type = dtype == "F32"    ? torch::kFloat32
                      : dtype == "BF16" ? torch::kBFloat16
                      : dtype == "F16"  ? torch::kFloat16
                                        : throw Error("tensor " + name + " has dtype " + dtype, path.string(),
                                                      "export the model in F32, BF16 or F16");
    const std::vector<int64_t> shape = info.at("shape");
    const int64_t begin = info.at("data_offsets")[0], end = info.at("data_offsets")[1];
    auto t = torch::empty(shape, type);
    if (t.numel() * t.element_size() != end - begin)
      throw Error("tensor " + name + ": its offsets do not match its shape", path.string());
    f.seekg(data_start + begin);
    if (!f.read(static_cast<char*>(t.data_ptr()), end - begin))
      throw Error("tensor " + name + " is cut short", path.string(), "copy the file again");
    out[name] = t;
  }
}

std::map<std::string, torch::Tensor> read_weights(const fs::path& dir) {
  std::map<std::string, torch::Tensor> tensors;
  if (fs::exists(dir / "model.safetensors.index.json")) {
    std::set<std::string> files;
    for (const auto& [name, file] : read_json(dir / "model.safetensors.index.json").at("weight_map").items())
      files.insert(file.get<std::string>());
    for (const auto& file : files) read_safetensors(dir / file, tensors);
  } else if (fs::exists(dir / "model.safetensors")) {
    read_safetensors(dir / "model.safetensors", tensors);
  } else {
    throw Error("no model.safetensors (or index) in the folder", dir.string(),
                "pass a folder saved with safe_serialization (the default)");
  }
  return tensors;
}

// The run config of a stock Llama folder: Pre-Norm, RMSNorm, SwiGLU, RoPE, no biases.
TrainConfig config_from_llama(const json& j, const fs::path& dir) {
  const std::string where = (dir / "config.json").string();
  auto need = [&](const char* key) {
    if (!j.contains(key)) throw Error(std::string("missing key ") + key, where);
    return j.at(key);
  };
  auto refuse = [&](const char* key, const std::string& why) {
    throw Error(fmt::format("config key {} ({}) cannot be represented: {}", key, j.at(key).dump(), why),
                where, "only a plain Pre-Norm Llama can be imported");
  };
  if (j.contains("rope_scaling") && !j.at("rope_scaling").is_null()) refuse("rope_scaling", "RoPE scaling");
  if (j.contains("rope_parameters") && j.at("rope_parameters").value("rope_type", "default") != "default")
    refuse("rope_parameters", "RoPE scaling");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (j.value(key, false)) refuse(key, "biases");
  if (j.value("hidden_act", "silu") != "silu") refuse("hidden_act", "SwiGLU uses silu");
  TrainConfig cfg;
  auto& m = cfg.model;
  m.residual = "pre";
  m.layer_norm_type = "rms";
  m.activation_type = "swiglu";
  m.rope = true;
  m.include_bias = false;
  m.attention_dropout = m.residual_dropout = m.embedding_dropout = 0.0;
  m.d_model = need("hidden_size");
  m.n_layers = need("num_hidden_layers");
  m.n_heads = need("num_attention_heads");
  m.n_kv_heads = j.value("num_key_value_heads", m.n_heads);
  if (j.contains("head_dim") && !j.at("head_dim").is_null() && j.at("head_dim") != m.d_model / m.n_heads)
    refuse("head_dim", "the head size must be hidden_size / num_attention_heads");
  m.mlp_hidden_size = 2 * need("intermediate_size").get<int64_t>();
  m.layer_norm_eps = j.value("rms_norm_eps", 1e-6);
  m.rope_theta = j.contains("rope_parameters") ? j.at("rope_parameters").value("rope_theta", 10000.0)
                                               : j.value("rope_theta", 10000.0);
  m.vocab_size = m.embedding_size = need("vocab_size");
  m.max_sequence_length = j.value("max_position_embeddings", 2048);
  m.weight_tying = j.value("tie_word_embeddings", false);
  if (j.contains("eos_token_id") && j.at("eos_token_id").is_number()) m.eos_token_id = j.at("eos_token_id");
  m.pad_token_id = j.contains("pad_token_id") && j.at("pad_token_id").is_number()
                       ? j.at("pad_token_id").get<int64_t>()
                       : m.eos_token_id;
  if (fs::exists(dir / "tokenizer.json")) cfg.tokenizer.identifier = (dir / "tokenizer.json").string();
  return cfg;
}

int run_import(const std::string& folder, const std::string& out_dir) {
  const fs::path dir(folder), out(out_dir);
  const json j = read_json(dir / "config.json");
  const std::string type = j.value("model_type", "");
  TrainConfig cfg;
  if (j.contains("siamese_run_config")) {
    // Written by `siamese export`: the run config as it was.
    fs::create_directories(out);
    const fs::path yaml = out / "imported_config.yaml";
    std::ofstream(yaml) << j.at("siamese_run_config").get<std::string>();
    cfg = load_config(yaml.string(), {});
    fs::remove(yaml);
  } else if (type == "llama") {
    cfg = config_from_llama(j, dir);
  } else {
    throw Error("model_type \"" + type + "\" cannot be imported", (dir / "config.json").string(),
                "import a folder written by `siamese export` or a LlamaForCausalLM folder");
  }
  cfg.save_folder = out.string();
  model::apply_required_settings(cfg.model);
  model::Transformer m(cfg.model);
  auto tensors = read_weights(dir);
  const std::string where = dir.string();
  NamedTensors ours;
  if (type == "llama") {
    ours = ours_from_llama(cfg.model, std::move(tensors), where);
  } else {
    for (auto& [name, t] : tensors) ours.emplace_back(name, t);
  }
  auto params = m->named_parameters();
  std::set<std::string> seen;
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : ours) {
    if (!params.contains(name))
      throw Error("tensor " + name + " has no place in this model", where,
                  "check that config.json describes these weights");
    if (params[name].sizes() != t.sizes())
      throw Error(fmt::format("tensor {} has shape {}, the model {}", name, fmt::join(t.sizes(), "x"),
                              fmt::join(params[name].sizes(), "x")),
                  where);
    params[name].copy_(t);
    seen.insert(name);
  }
  for (const auto& p : params)
    if (!seen.count(p.key()))
      throw Error("no tensor for parameter " + p.key(), where, "the folder is incomplete");
  train::AdamW optim(m->parameters(), torch::optim::AdamWOptions(cfg.optimizer.learning_rate));
  const auto step = train::save_checkpoint(out, *m, optim, train::TrainState{}, to_yaml(cfg));
  spdlog::info("imported {} ({}) into {}", dir.string(), cfg.model.residual, step.string());
  return 0;
}

}  // namespace

void add_import_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("import", "Read a Hugging Face model folder into a checkpoint");
  auto folder = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("folder", *folder, "folder written by `siamese export`, or a LlamaForCausalLM folder")
      ->required();
  cmd->add_option("--out", *out, "run folder to write step0 into")->required();
  cmd->callback([&run, folder, out] { run = [folder, out] { return run_import(*folder, *out); }; });
}

}  // namespace siamese::cli
