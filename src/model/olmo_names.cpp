#include "siamese/model/olmo_names.h"

#include <fmt/format.h>

#include <map>
#include <regex>
#include <set>

#include "siamese/common/error.h"

namespace siamese::model {
namespace {

const std::regex kOlmoAttn(R"(blocks\.(\d+)\.((att_proj|attn_out|q_norm|k_norm|v_norm)\..+))");
// block_type moe's router and stacked experts keep our names under the block (OLMo's
// megablocks keys, ffn.router.layer / ffn.experts.mlp.w1, hold other shapes).
const std::regex kOlmoMlp(R"(blocks\.(\d+)\.((ff_proj|ff_out|router|experts)\..+))");
bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// "{l}.<rest>" after a "blocks." prefix: the layer and the rest, or nothing.
std::optional<std::pair<int64_t, std::string>> block_part(const std::string& s) {
  const size_t dot = s.find('.');
  if (dot == 0 || dot == std::string::npos || dot + 1 == s.size() || s.find_first_not_of("0123456789") != dot)
    return std::nullopt;
  return std::pair{std::stoll(s.substr(0, dot)), s.substr(dot + 1)};
}

}  // namespace

ParamName parse_param_name(const std::string& name) {
  using Owner = ParamName::Owner;
  for (const char* embedding : {"wte.", "wpe.", "emb_norm."})
    if (starts_with(name, embedding)) return {Owner::Embedding, std::nullopt, name};
  if (starts_with(name, "ff_out.")) return {Owner::Head, std::nullopt, name};
  if (starts_with(name, "blocks."))
    if (const auto b = block_part(name.substr(7))) {
      if (starts_with(b->second, "attn.")) return {Owner::Attention, b->first, b->second.substr(5)};
      if (starts_with(b->second, "mlp.")) return {Owner::Mlp, b->first, b->second.substr(4)};
    }
  if (starts_with(name, "topology.")) {
    const std::string rest = name.substr(9);
    if (starts_with(rest, "blocks."))
      if (const auto b = block_part(rest.substr(7))) return {Owner::Topology, b->first, b->second};
    if (!rest.empty() && !starts_with(rest, "blocks.")) return {Owner::Topology, std::nullopt, rest};
  }
  throw Error(
      "'" + name + "' is not a parameter name of this model", name,
      "names are wte.*, wpe.*, emb_norm.*, blocks.{i}.attn.*, blocks.{i}.mlp.*, topology.* or ff_out.*");
}

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
  const ParamName p = parse_param_name(name);
  switch (p.owner) {
    case ParamName::Owner::Attention:
    case ParamName::Owner::Mlp:
    case ParamName::Owner::Topology:
      return "transformer." + (p.layer ? fmt::format("blocks.{}.", *p.layer) : std::string()) + p.local;
    case ParamName::Owner::Embedding:
    case ParamName::Owner::Head:
      break;
  }
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
                                     fmt::join(tensor.sizes(), "x"), fmt::join(params[name].sizes(), "x")));
    }
  }
  for (const auto& p : params)
    if (!given.count(p.key())) problems.push_back("missing " + to_olmo_key(p.key()));
  if (!problems.empty())
    throw Error(fmt::format("OLMo state does not fit the model ({} problems): {}", problems.size(),
                            fmt::join(problems, "; ")),
                where,
                "check that model.* (sizes, residual topology, weight_tying, biases) "
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
