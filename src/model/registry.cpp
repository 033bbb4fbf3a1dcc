#include "siamese/model/registry.h"

#include <fmt/format.h>

#include "siamese/common/error.h"
#include "siamese/config/schema.h"
#include "siamese/config/validate.h"
#include "siamese/model/topologies.h"

namespace siamese::model {
namespace {

Error unknown_topology(const std::string& name) {
  return Error("unknown topology '" + name + "'", "model.residual",
               fmt::format("use one of: {}", fmt::join(topology_names(), ", ")));
}

const TopologySpec& spec_of(const std::string& name) {
  const TopologySpec* spec = find_topology(name);
  if (!spec) throw unknown_topology(name);
  return *spec;
}

}  // namespace

const TopologySpec* find_topology(const std::string& name) {
  for (const auto& t : topologies())
    if (t.name == name) return &t;
  return nullptr;
}

const std::vector<std::string>& topology_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& t : topologies()) n.push_back(t.name);
    return n;
  }();
  return names;
}

const std::string& topology_description(const std::string& name) { return spec_of(name).description; }

const std::vector<std::string>& settings_required_by(const std::string& name) {
  static const std::vector<std::string> none;
  const TopologySpec* spec = find_topology(name);
  return spec ? spec->required : none;
}

void apply_required_settings(ModelConfig& cfg) {
  TrainConfig probe;
  probe.model = cfg;
  for (const auto& key : settings_required_by(cfg.residual)) schema::train_field(key).ref<bool>(probe) = true;
  cfg = probe.model;
}

std::string topologies_markdown() {
  std::string out =
      "\n### Topologies (`model.residual`, `MODEL_TYPE`)\n\n| name | streams | turns on | update rule |\n"
      "|---|---|---|---|\n";
  auto code = [](const std::vector<std::string>& items) {
    std::vector<std::string> quoted;
    for (const auto& i : items) quoted.push_back("`" + i + "`");
    return fmt::format("{}", fmt::join(quoted, ", "));
  };
  for (const auto& t : topologies())
    out += fmt::format("| `{}` | {} | {} | {} |\n", t.name, code(t.streams), code(t.required), t.description);
  return out;
}

std::shared_ptr<TopologyImpl> make_topology(const ModelConfig& cfg) {
  check_model_config(cfg);
  return spec_of(cfg.residual).make(cfg);
}

void check_model_config(const ModelConfig& cfg) {
  const TopologySpec& spec = spec_of(cfg.residual);
  validate_model(cfg);
  TrainConfig probe;
  probe.model = cfg;
  for (const auto& key : spec.required)
    if (!schema::train_field(key).ref<bool>(probe))
      throw Error("topology '" + cfg.residual + "' is defined with " + key + " on", key,
                  "set it to true, or leave it out of the config: choosing the topology turns it on");
}

}  // namespace siamese::model
