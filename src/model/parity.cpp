#include "siamese/model/parity.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "siamese/common/error.h"
#include "siamese/common/npy.h"
#include "siamese/config/load.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"

namespace siamese::model {
namespace fs = std::filesystem;

namespace {

template <typename T>
T get(const YAML::Node& m, const char* key, T fallback) {
  const auto n = m[key];
  return (!n || n.IsNull()) ? fallback : n.as<T>();
}

ParityRow compare(const std::string& name, const torch::Tensor& ours, const torch::Tensor& ref,
                  const std::string& path) {
  if (ours.sizes() != ref.sizes())
    throw Error(fmt::format("{}: shape {} here, {} in the reference", name, fmt::join(ours.sizes(), "x"),
                            fmt::join(ref.sizes(), "x")),
                path, "the golden folder and the model config disagree");
  auto a = ours.detach().to(torch::kDouble), b = ref.to(torch::kDouble);
  ParityRow row{name};
  row.max_abs = (a - b).abs().max().item<double>();
  const double scale = b.abs().max().item<double>();
  row.max_rel = scale > 0 ? row.max_abs / scale : row.max_abs;
  return row;
}

std::string stem(const fs::path& p) {
  std::string s = p.filename().string();
  return s.substr(0, s.size() - 4);  // drop ".npy"
}

}  // namespace

config::ModelConfig model_config_from_olmo(const std::string& config_json,
                                           const std::vector<std::string>& olmo_keys) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(config_json);
  } catch (const YAML::Exception& e) {
    throw Error(std::string("cannot parse: ") + e.what(), config_json, "check the JSON");
  }
  const YAML::Node m = root["model_config_full"] ? root["model_config_full"] : root;
  const std::string where = config_json + " (model_config_full)";

  std::vector<std::string> unsupported;
  auto reject_if = [&](bool cond, const std::string& what) {
    if (cond) unsupported.push_back(what);
  };
  reject_if(get(m, "alibi", false), "alibi: true");
  reject_if(get<std::string>(m, "block_type", "sequential") != "sequential",
            "block_type: " + get<std::string>(m, "block_type", ""));
  reject_if(get<int64_t>(m, "block_group_size", 1) != 1, "block_group_size != 1");
  reject_if(get(m, "norm_after", false), "norm_after: true");
  reject_if(get(m, "use_context_norm", false), "use_context_norm: true");
  reject_if(get(m, "attn_residual_after_norm", false), "attn_residual_after_norm: true");

  // Every OLMo model key the schema knows, by its OLMo name.
  config::ModelConfig c = config::read_olmo_model(config_json);

  // Topology from HybridNorm's flags (absent in upstream OLMo: plain Pre-Norm).
  const bool attn_norm = get(m, "attn_norm", true), ffn_norm = get(m, "ffn_norm", true);
  const bool ffn_after = get(m, "ffn_residual_after_norm", false);
  const std::string special = get<std::string>(m, "norm_pos_special_config", "");
  const bool second_stream = std::any_of(olmo_keys.begin(), olmo_keys.end(), [](const auto& k) {
    return k.rfind("transformer.ln_y_f.", 0) == 0;
  });
  const bool hybrid_flags = !attn_norm && ffn_norm && ffn_after;
  const std::string hybrid_star_special = "_{0:{'attn_norm':True,'ffn_residual':False}}_";
  if (second_stream) {
    reject_if(!hybrid_flags || !special.empty(),
              "a second stream with flags other than attn_norm=False, ffn_norm=True, "
              "ffn_residual_after_norm=True, norm_pos_special_config=''");
    c.residual = "hybrid_pre";
  } else if (hybrid_flags && special.empty()) {
    c.residual = "hybrid";
  } else if (hybrid_flags && special == hybrid_star_special) {
    c.residual = "hybrid_star";
  } else if (attn_norm && ffn_norm && !ffn_after && special.empty()) {
    c.residual = "pre";
  } else {
    unsupported.push_back(
        fmt::format("norm placement attn_norm={} ffn_norm={} ffn_residual_after_norm={} "
                    "norm_pos_special_config='{}'",
                    attn_norm, ffn_norm, ffn_after, special));
  }
  if (std::find(topology_names().begin(), topology_names().end(), c.residual) == topology_names().end())
    unsupported.push_back("topology " + c.residual + " (not registered)");
  if (!unsupported.empty())
    throw Error(
        "OLMo model options without a counterpart here: " + fmt::format("{}", fmt::join(unsupported, "; ")),
        where, "this golden case cannot be reproduced by siamese's model");
  return c;
}

double ParityResult::worst_rel() const {
  double w = 0;
  for (const auto& r : rows) w = std::max(w, r.max_rel);
  return w;
}

ParityResult run_parity(const std::string& golden_dir) {
  const fs::path dir(golden_dir);
  for (const char* need : {"config.json", "weights", "input_ids.npy", "logits.npy", "loss.npy"})
    if (!fs::exists(dir / need))
      throw Error(std::string("missing ") + need, golden_dir,
                  "point at a folder with the shared/golden/README.md layout");

  NamedTensors weights;
  std::vector<std::string> keys;
  for (const auto& e : fs::directory_iterator(dir / "weights")) {
    if (e.path().extension() != ".npy") continue;
    keys.push_back(stem(e.path()));
    weights.emplace_back(keys.back(), read_npy(e.path().string()));
  }
  std::sort(weights.begin(), weights.end(), [](const auto& a, const auto& b) { return a.first < b.first; });

  config::ModelConfig cfg = model_config_from_olmo((dir / "config.json").string(), keys);
  torch::manual_seed(0);
  Transformer model(cfg);
  load_olmo_state(*model, weights, (dir / "weights").string());
  model->eval();

  ParityResult result;
  result.topology = cfg.residual;
  std::map<std::string, torch::Tensor> hidden;  // "<stream>_after_block_<i>", "final_hidden"
  const Probe probe = [&](int64_t layer, const std::string& stream, const torch::Tensor& t) {
    if (stream == "final")
      hidden["final_hidden"] = t.detach().clone();
    else if (layer >= 0)
      hidden[fmt::format("{}_after_block_{}", stream, layer)] = t.detach().clone();
  };
  std::map<std::string, torch::Tensor> sublayer;  // "block<i>/attn_in", ...
  const Probe sublayer_probe = [&](int64_t layer, const std::string& name, const torch::Tensor& t) {
    sublayer[fmt::format("block{}/{}", layer, name)] = t.detach().clone();
  };
  ForwardOptions opts;
  opts.probe = &probe;
  opts.sublayer_probe = &sublayer_probe;

  const auto ids = read_npy((dir / "input_ids.npy").string()).to(torch::kLong);
  auto logits = model->forward(ids, opts);
  auto loss = next_token_nll_sum(logits, ids) / double(ids.size(0) * (ids.size(1) - 1));
  loss.backward();

  result.rows.push_back(
      compare("logits", logits, read_npy((dir / "logits.npy").string()), (dir / "logits.npy").string()));
  result.rows.push_back(compare("loss", loss.reshape({1}), read_npy((dir / "loss.npy").string()).reshape({1}),
                                (dir / "loss.npy").string()));

  auto params = model->named_parameters();
  if (!fs::exists(dir / "grad"))
    throw Error("missing grad/", golden_dir, "the golden folder must hold every parameter's gradient");
  std::set<std::string> graded;
  for (const auto& e : fs::directory_iterator(dir / "grad")) {
    if (e.path().extension() != ".npy") continue;
    const std::string key = stem(e.path()), name = from_olmo_key(key);
    if (!params.contains(name))
      throw Error("gradient for unknown parameter " + key, e.path().string(),
                  "the golden folder does not match its own weights/");
    const auto& g = params[name].grad();
    TORCH_CHECK(g.defined(), "parameter ", name, " received no gradient");
    result.rows.push_back(compare("grad " + key, g, read_npy(e.path().string()), e.path().string()));
    graded.insert(name);
  }
  for (const auto& p : params)
    if (!graded.count(p.key()))
      throw Error("no reference gradient for " + to_olmo_key(p.key()), (dir / "grad").string(),
                  "the golden folder must hold every parameter's gradient");

  if (fs::exists(dir / "hidden")) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir / "hidden"))
      if (e.path().extension() == ".npy") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const auto it = hidden.find(stem(f));
      if (it == hidden.end()) {
        result.not_compared.push_back("hidden/" + f.filename().string());
        continue;
      }
      result.rows.push_back(compare("hidden " + stem(f), it->second, read_npy(f.string()), f.string()));
    }
  }
  if (fs::exists(dir / "intermediates")) {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(dir / "intermediates"))
      if (e.path().extension() == ".npy") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string key = f.parent_path().filename().string() + "/" + stem(f);
      const auto it = sublayer.find(key);
      if (it == sublayer.end()) {
        result.not_compared.push_back("intermediates/" + key + ".npy");
        continue;
      }
      result.rows.push_back(compare("intermediate " + key, it->second, read_npy(f.string()), f.string()));
    }
  }
  return result;
}

}  // namespace siamese::model
