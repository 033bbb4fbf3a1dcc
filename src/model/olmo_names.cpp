#include "siamese/model/olmo_names.h"

#include <fmt/format.h>

#include <map>
#include <regex>
#include <set>

#include "siamese/common/error.h"

namespace siamese::model {
namespace {

const std::regex kOlmoAttn(R"(blocks\.(\d+)\.((att_proj|attn_out|q_norm|k_norm|v_norm)\..+))");
const std::regex kOlmoMlp(R"(blocks\.(\d+)\.((ff_proj|ff_out)\..+))");
const std::regex kOursBlock(R"(blocks\.(\d+)\.(attn|mlp)\.(.+))");

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

std::string from_olmo_key(const std::string& key) {
  std::string k = starts_with(key, "model.") ? key.substr(6) : key;
  if (!starts_with(k, "transformer."))
    throw Error("'" + key + "' is not an OLMo model key (expected transformer.*)", key,
                "pass an OLMo state_dict (keys like transformer.blocks.0.att_proj.weight)");
  k = k.substr(12);
  std::smatch m;
  if (std::regex_match(k, m, kOlmoAttn)) return "blocks." + m[1].str() + ".attn." + m[2].str();
  if (std::regex_match(k, m, kOlmoMlp)) return "blocks." + m[1].str() + ".mlp." + m[2].str();
  for (const char* top : {"wte.", "wpe.", "emb_norm.", "ff_out."})
    if (starts_with(k, top)) return k;
  return "topology." + k;
}

std::string to_olmo_key(const std::string& name) {
  std::smatch m;
  if (std::regex_match(name, m, kOursBlock))
    return "transformer.blocks." + m[1].str() + "." + m[3].str();
  if (starts_with(name, "topology.")) return "transformer." + name.substr(9);
  return "transformer." + name;
}

void load_olmo_state(TransformerImpl& model, const NamedTensors& state, const std::string& where) {
  auto params = model.named_parameters();
  std::map<std::string, torch::Tensor> given;
  std::vector<std::string> problems;
  for (const auto& [key, tensor] : state) {
    const std::string name = from_olmo_key(key);
    if (!params.contains(name)) {
      problems.push_back("unexpected " + key + " (no parameter " + name + " in this model)");
    } else if (!given.emplace(name, tensor).second) {
      problems.push_back("duplicate " + key);
    } else if (params[name].sizes() != tensor.sizes()) {
      problems.push_back(fmt::format("{}: shape {} in the file, {} in the model", key,
                                     fmt::join(tensor.sizes(), "x"),
                                     fmt::join(params[name].sizes(), "x")));
    }
  }
  for (const auto& p : params)
    if (!given.count(p.key())) problems.push_back("missing " + to_olmo_key(p.key()));
  if (!problems.empty())
    throw Error(fmt::format("OLMo state does not fit the model ({} problems): {}", problems.size(),
                            fmt::join(problems, "; ")),
                where, "check that model.* (sizes, residual topology, weight_tying, biases) "
                       "matches the checkpoint");
  torch::NoGradGuard guard;
  for (auto& p : params) p.value().copy_(given[p.key()]);
}

NamedTensors olmo_state(TransformerImpl& model) {
  NamedTensors out;
  for (const auto& p : model.named_parameters()) out.emplace_back(to_olmo_key(p.key()), p.value());
  return out;
}

}  // namespace siamese::model
