#include "siamese/model/topology_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "siamese/common/error.h"
#include "siamese/config/schema.h"
#include "siamese/config/validate.h"
#include "siamese/model/parametrization.h"

namespace siamese::model {
namespace {

// Where the user chose the topology, for errors: "configs/x.yaml:3", "environment
// MODEL_TYPE", "--model.residual"; without an origin (configs built in code), the key.
std::string topology_source(const config::ConfigOrigin* origin) {
  if (!origin || origin->topology == "default") return "model.residual";
  const std::string& t = origin->topology;
  return (t == "MODEL_TYPE" ? "environment MODEL_TYPE" : t) + " (model.residual)";
}

Error unknown_topology(const std::string& name, const config::ConfigOrigin* origin = nullptr) {
  return Error("unknown topology \"" + name + "\"", topology_source(origin),
               fmt::format("use one of: {}", fmt::join(topology_names(), ", ")));
}

const TopologySpec& spec_of(const std::string& name) {
  const TopologySpec* spec = find_topology(name);
  if (!spec) throw unknown_topology(name);
  return *spec;
}

// The row's required settings and those of the row its requires_as key names.
std::vector<Flag> required_settings(const TopologySpec& spec, const config::ModelConfig& cfg) {
  std::vector<Flag> flags = spec.required;
  if (!spec.requires_as) return flags;
  const auto& other = settings_required_by(spec.requires_as(cfg));
  flags.insert(flags.end(), other.begin(), other.end());
  return flags;
}

// The topology-specific keys the row reads, and those of the row whose placement it takes.
std::vector<std::string> settings_read(const TopologySpec& spec, const config::ModelConfig& cfg) {
  std::vector<std::string> keys = spec.reads;
  if (!spec.requires_as) return keys;
  if (const TopologySpec* other = find_topology(spec.requires_as(cfg)))
    keys.insert(keys.end(), other->reads.begin(), other->reads.end());
  return keys;
}

// Names each key the user set away from its default that only other topologies read. A
// warning, not a refusal: such a key is most often a sweep's base setting for the variants
// that read it. Defaults are left alone: a resolved config (a checkpoint's) writes every key.
void warn_of_unread_settings(const TopologySpec& spec, const config::TrainConfig& config,
                             const config::ConfigOrigin& origin) {
  const config::ModelConfig& cfg = config.model;
  const std::vector<std::string> read = settings_read(spec, cfg);
  const config::TrainConfig defaults;
  for (const auto& [key, where] : origin.explicit_keys) {
    if (std::find(read.begin(), read.end(), key) != read.end()) continue;
    std::vector<std::string> readers;
    for (const auto& t : topologies())
      if (std::find(t.reads.begin(), t.reads.end(), key) != t.reads.end()) readers.push_back(t.name);
    if (readers.empty()) continue;
    const auto& field = config::schema::train_field(key);
    if (config::schema::value_text(field, config) == config::schema::value_text(field, defaults)) continue;
    spdlog::warn(
        "{}: {} is set, but topology {} does not read it (only {} do); it changes nothing in this run", where,
        key, cfg.residual, fmt::join(readers, ", "));
  }
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

const std::vector<Flag>& settings_required_by(const std::string& name) {
  static const std::vector<Flag> none;
  const TopologySpec* spec = find_topology(name);
  return spec ? spec->required : none;
}

void apply_required_settings(config::ModelConfig& cfg) {
  if (const TopologySpec* spec = find_topology(cfg.residual))
    for (const auto& flag : required_settings(*spec, cfg)) cfg.*flag.member = true;
}

void apply_topology_defaults(config::ModelConfig& cfg) {
  const TopologySpec* spec = find_topology(cfg.residual);
  if (!spec) return;  // check_model_config names the unknown topology
  for (const auto& d : spec->defaults) cfg.*d.member = d.value;
}

std::string topologies_markdown() {
  std::string out =
      "\n### Topologies (`model.residual`, `MODEL_TYPE`)\n\n| name | streams | turns on | defaults | update "
      "rule "
      "|\n|---|---|---|---|---|\n";
  auto code = [](const std::vector<std::string>& items) {
    std::vector<std::string> quoted;
    for (const auto& i : items) quoted.push_back("`" + i + "`");
    return fmt::format("{}", fmt::join(quoted, ", "));
  };
  for (const auto& t : topologies()) {
    std::vector<std::string> defaults;
    for (const auto& d : t.defaults) defaults.push_back(fmt::format("`{}: {}`", d.key, d.value));
    std::vector<std::string> required;
    for (const auto& flag : t.required) required.push_back(flag.key);
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", t.name, code(t.streams), code(required),
                       fmt::join(defaults, ", "), t.description);
  }
  return out;
}

std::shared_ptr<TopologyImpl> make_topology(const config::ModelConfig& cfg) {
  check_model_config(cfg);
  return spec_of(cfg.residual).make(cfg);
}

void check_model_config(const config::ModelConfig& cfg, const config::ConfigOrigin* origin) {
  const TopologySpec* spec = find_topology(cfg.residual);
  if (!spec) throw unknown_topology(cfg.residual, origin);
  const std::vector<Flag> required = required_settings(*spec, cfg);
  try {
    config::validate_model(cfg);
  } catch (const Error& e) {
    // A conflict with a setting the topology turns on can only be fixed on the other side.
    for (const auto& flag : required)
      if (e.where().find("(" + flag.key + ")") != std::string::npos)
        throw Error(
            e.problem(), e.where(),
            fmt::format("topology {}{} needs {} on: set the other setting named here off, or choose "
                        "another topology",
                        cfg.residual,
                        spec->requires_as ? " (with its " + spec->requires_as(cfg) + " placement)" : "",
                        flag.key));
    throw;
  }
  for (const auto& flag : required) {
    if (cfg.*flag.member) continue;
    const std::string& key = flag.key;
    std::string where = key;
    if (origin && origin->explicit_keys.count(key)) where = origin->explicit_keys.at(key) + " (" + key + ")";
    throw Error(fmt::format("topology {}{} is defined with {} on, but it is set to false", cfg.residual,
                            origin ? " (from " + origin->topology + ")" : "", key),
                where, "remove the setting (the topology turns it on), or choose another topology");
  }
  check_parametrization(cfg, spec->no_width_rule, spec->no_depth_rule);
}

config::TrainConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                                    const config::LaunchSettings& launch) {
  config::ConfigOrigin origin;
  config::TrainConfig config = config::load_config(path, overrides, launch, &origin);
  if (origin.topology == "default") origin.topology = path;
  if (!find_topology(config.model.residual)) throw unknown_topology(config.model.residual, &origin);
  const TopologySpec& spec = *find_topology(config.model.residual);
  for (const auto& flag : required_settings(spec, config.model))
    if (!origin.explicit_keys.count(flag.key)) config.model.*flag.member = true;
  for (const auto& d : spec.defaults)
    if (!origin.explicit_keys.count(d.key)) config.model.*d.member = d.value;
  check_model_config(config.model, &origin);
  warn_of_unread_settings(spec, config, origin);
  spdlog::info("topology: {} (from {})", config.model.residual, origin.topology);
  return config;
}

}  // namespace siamese::model
