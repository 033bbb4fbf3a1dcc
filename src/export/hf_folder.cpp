#include "siamese/export/hf_folder.h"
#include "siamese/model/parametrization.h"

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/config/schema.h"
#include "siamese/export/hf_stock.h"
#include "siamese/export/safetensors.h"
#include "siamese/model/accounting.h"
#include "siamese/model/attention.h"
#include "siamese/model/mlp.h"
#include "siamese/model/topology_table.h"
#include "siamese/modeling_py.h"
#include "siamese/tokenizer/tokenizer.h"

namespace siamese::hf {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr const char* kExportFix =
    "free disk space or export to a disk with room; an earlier export there is untouched";

// The settings modeling_siamese.py reads: `settings`, every model.* key of the schema (nested
// as in the YAML), with the ones the C++ model resolves at build time given resolved.
json siamese_config(const config::ModelConfig& c, json settings) {
  json j = {{"architectures", {"SiameseForCausalLM"}},
            {"model_type", "siamese"},
            {"auto_map",
             {{"AutoConfig", "modeling_siamese.SiameseConfig"},
              {"AutoModelForCausalLM", "modeling_siamese.SiameseForCausalLM"}}}};
  j.update(common_hf_config(c));
  j["use_cache"] = false;
  settings["n_kv_heads"] = model::kv_head_count(c);
  settings["mlp_hidden_size"] = model::mlp_hidden_size(c);
  settings["bias_for_layer_norm"] = c.bias_for_layer_norm.value_or(c.include_bias);
  // model.parametrization's forward multipliers as numbers: the rules stay in the C++.
  const model::Parametrization shape = model::parametrization(c);
  settings["multipliers"] = {
      {"softmax", shape.softmax()}, {"branch", shape.branch()}, {"logits", shape.logits()}};
  j["siamese"] = settings;
  return j;
}

void write_json(const fs::path& path, const json& j) {
  write_file_atomically(path, j.dump(2) + "\n", kExportFix);
}

// `out` may be replaced: missing, an empty folder, or an earlier export.
void check_replaceable(const fs::path& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec))
    throw Error("the output exists and is not a folder", out.string(), "pass --out a folder path");
  if (fs::is_empty(out, ec) || fs::exists(out / "config.json", ec)) return;
  throw Error("the output folder holds files that are not a model export", out.string(),
              "export into a new or empty folder (the files there are untouched)");
}

void remove_quietly(const fs::path& p) {
  std::error_code ignored;
  fs::remove_all(p, ignored);
}

}  // namespace

std::string export_model(const config::TrainConfig& config, model::TransformerImpl& model,
                         const fs::path& out_path, const ExportOptions& options) {
  const config::ModelConfig& c = config.model;
  const fs::path out = out_path.filename().empty() ? out_path.parent_path() : out_path;
  check_replaceable(out);
  if (c.moe_router_bias_rate)
    throw Error(
        "the model's routers carry a score bias (model.moe_router_bias_rate), which neither OLMoE nor "
        "modeling_siamese.py applies: the export would route tokens to other experts",
        "model.moe_router_bias_rate",
        "evaluate it with `siamese eval` and `siamese generate`, which apply the bias");
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (!options.tokenizer.empty()) {
    if (!fs::exists(options.tokenizer))
      throw Error(fmt::format("tokenizer file \"{}\" not found", options.tokenizer), "tokenizer",
                  "pass --tokenizer PATH/tokenizer.json (the one the run was trained with)");
    tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(options.tokenizer));
    if (tok->max_token_id() >= c.vocab_size)
      throw Error(fmt::format("the tokenizer produces ids up to {} but the model's vocab_size is {}",
                              tok->max_token_id(), c.vocab_size),
                  options.tokenizer, "pass --tokenizer the tokenizer.json the run was trained with");
  }
  NamedTensors ours;
  for (const auto& p : model.named_parameters()) ours.emplace_back(p.key(), p.value().detach().contiguous());
  std::string why;
  const StockClass* stock = stock_class_of(c, &why);

  if (!out.parent_path().empty()) fs::create_directories(out.parent_path());
  const fs::path tmp = scratch_path(out, "tmp"), old = scratch_path(out, "old");
  remove_quietly(tmp);
  try {
    fs::create_directories(tmp);
    // The whole run config rides along, so that `siamese import` restores it as it was.
    json cfg =
        stock ? stock_config(*stock, c) : siamese_config(c, config::schema::nested_json(config, "model."));
    cfg["siamese_run_config"] = config::to_yaml(config);
    if (stock) {
      write_weights(tmp, stock_tensors(*stock, c, ours), options.max_shard_bytes);
    } else {
      write_weights(tmp, ours, options.max_shard_bytes);
      write_file_atomically(tmp / "modeling_siamese.py", kModelingSiamesePy, kExportFix);
    }
    // max_new_tokens rather than max_length: generate() then needs no warning about a
    // length the prompt already uses up.
    write_json(tmp / "generation_config.json", {{"eos_token_id", c.eos_token_id},
                                                {"pad_token_id", c.pad_token_id},
                                                {"do_sample", false},
                                                {"use_cache", stock != nullptr}});
    if (tok) {
      std::ifstream in(options.tokenizer, std::ios::binary);
      write_file_atomically(tmp / "tokenizer.json", std::string(std::istreambuf_iterator<char>(in), {}),
                            kExportFix);
      // A stock class with the ids' tokens named, so that transformers needs no code of ours to
      // build it; decoding keeps spaces as they are, as siamese's decode does.
      json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                 {"model_max_length", c.max_sequence_length},
                 {"clean_up_tokenization_spaces", false}};
      if (const auto eos = tok->id_to_token(int32_t(c.eos_token_id))) tc["eos_token"] = *eos;
      if (const auto pad = tok->id_to_token(int32_t(c.pad_token_id))) tc["pad_token"] = *pad;
      write_json(tmp / "tokenizer_config.json", tc);
    }
    // Last: a folder with config.json is a complete export.
    write_json(tmp / "config.json", cfg);
    fsync_path(tmp);
    remove_quietly(old);
    if (fs::exists(out)) fs::rename(out, old);
    fs::rename(tmp, out);
    fsync_path(out.parent_path().empty() ? fs::path(".") : out.parent_path());
    remove_quietly(old);
  } catch (const fs::filesystem_error& e) {
    remove_quietly(tmp);
    throw write_error(e.path1().empty() ? out : e.path1(), e.code().value(), kExportFix);
  } catch (...) {
    remove_quietly(tmp);
    throw;
  }
  return stock ? stock->architecture : "SiameseForCausalLM (" + why + ")";
}

namespace {

double physical_memory() { return double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE)); }

// transformers computes a stock folder with config.json's keys; the run config carried beside
// them restores the rest of the run. Where the two disagree (config.json edited after the
// export), taking the carried one would import another model than transformers runs, so the
// import stops and names every such key.
void refuse_edited_stock_keys(const StockClass& stock, const nlohmann::json& j, const fs::path& dir,
                              const config::ModelConfig& carried) {
  const auto differ = stock_disagreements(stock, j, dir, carried);
  if (differ.empty()) return;
  throw Error(
      fmt::format("config.json's keys disagree with the run config export carried in it, and transformers "
                  "computes with config.json's: {}",
                  fmt::join(differ, "; ")),
      (dir / "config.json").string(),
      "put those keys back to siamese_run_config's values; or, to import the model config.json now "
      "describes, delete the siamese_run_config key from config.json (the import then reads it as a "
      "stock " +
          stock.architecture + " folder, with default training settings)");
}

}  // namespace

ImportedModel import_model(const fs::path& dir) {
  const fs::path config_path = dir / "config.json";
  nlohmann::json j;
  {
    std::ifstream in(config_path);
    if (!in) throw Error("cannot read", config_path.string(), "pass a Hugging Face model folder");
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("not valid JSON: ") + e.what(), config_path.string(),
                  "export the folder again");
    }
  }
  const std::string type = j.value("model_type", "");
  // A folder `siamese export` wrote as a stock class carries the run config too: its weights
  // still have the stock names.
  const StockClass* stock = stock_class_named(type);
  const bool carried = j.contains("siamese_run_config") && j["siamese_run_config"].is_string();
  ImportedModel m;
  if (carried) {
    m.config = config::load_config_text(j["siamese_run_config"].get<std::string>(),
                                        config_path.string() + " (siamese_run_config)");
    if (stock) refuse_edited_stock_keys(*stock, j, dir, m.config.model);
  } else if (stock) {
    m.config = config_from_stock(*stock, j, dir);
  } else {
    throw Error("model_type \"" + type + "\" cannot be imported", config_path.string(),
                "import a folder written by `siamese export`, or a " + stock_class_list() + " folder");
  }
  model::apply_required_settings(m.config.model);
  try {
    model::check_model_config(m.config.model);
  } catch (const Error& e) {
    if (carried || !stock) throw;
    throw Error(in_stock_keys(e.problem()), config_path.string() + " " + in_stock_keys(e.where()),
                in_stock_keys(e.fix()));
  }
  // The weights are built in float32 in this machine's memory: a config.json with absurd
  // sizes is refused before that, not by the allocator.
  const double weights = model::training_state_bytes(m.config.model) / 4, memory = physical_memory();
  if (memory > 0 && weights > memory) {
    const auto& c = m.config.model;
    throw Error(
        fmt::format("config.json describes {:.3g} GiB of float32 weights; this machine has {:.3g} GiB",
                    weights / double(1 << 30), memory / double(1 << 30)),
        config_path.string(),
        fmt::format("check its sizes: hidden_size {}, num_hidden_layers {}, intermediate_size {}, "
                    "vocab_size {}{}",
                    c.d_model, c.n_layers, c.mlp_hidden_size.value_or(0) / 2, c.vocab_size,
                    c.is_moe() ? fmt::format(", num_experts {}", c.moe_num_experts) : std::string()));
  }
  m.model = model::Transformer(m.config.model);
  auto tensors = read_weights(dir);
  const std::string where = dir.string();
  NamedTensors ours;
  if (stock) {
    NamedTensors params;
    for (const auto& p : m.model->named_parameters()) params.emplace_back(p.key(), p.value());
    check_stock_shapes(*stock, m.config.model, params, tensors, where);
    ours = ours_from_stock(*stock, m.config.model, std::move(tensors), where);
  } else {
    for (auto& [name, t] : tensors) ours.emplace_back(name, t);
  }
  auto params = m.model->named_parameters();
  std::set<std::string> seen;
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : ours) {
    if (!params.contains(name))
      throw Error("tensor " + name + " has no place in this model", where,
                  "check that config.json describes these weights");
    if (params[name].sizes() != t.sizes())
      throw Error(fmt::format("tensor {} has shape {}, the model {}", name, fmt::join(t.sizes(), "x"),
                              fmt::join(params[name].sizes(), "x")),
                  where, "check that config.json describes these weights");
    params[name].copy_(t);
    seen.insert(name);
  }
  for (const auto& p : params)
    if (!seen.count(p.key()))
      throw Error("no tensor for parameter " + p.key(), where, "the folder is incomplete");
  return m;
}

}  // namespace siamese::hf
