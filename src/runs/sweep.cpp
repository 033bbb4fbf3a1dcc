#include "siamese/runs/sweep.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>

#include "siamese/common/error.h"
#include "siamese/config/variant.h"

namespace siamese::runs {

namespace fs = std::filesystem;

namespace {

template <typename T>
std::vector<T> list(const YAML::Node& root, const std::string& key, const std::string& path, bool required) {
  const YAML::Node n = root[key];
  if (!n) {
    if (required) throw Error(fmt::format("missing key \"{}\"", key), path, "see configs/sweeps/");
    return {};
  }
  if (!n.IsSequence() || n.size() == 0)
    throw Error(fmt::format("\"{}\" must be a non-empty list", key),
                fmt::format("{}:{}", path, n.Mark().line + 1), "write it as [a, b, ...]");
  std::vector<T> out;
  try {
    for (const auto& v : n) out.push_back(v.as<T>());
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("\"{}\" has an entry of the wrong type", key),
                fmt::format("{}:{}", path, e.mark.line + 1), "check the list's values");
  }
  return out;
}

// "1e-3" -> "0.001"-like short text for run names: {:g}.
std::string lr_text(double lr) { return fmt::format("{:g}", lr); }

}  // namespace

Sweep load_sweep(const std::string& path, const std::vector<int64_t>& seed_override) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("cannot read sweep file", path, "check the path");
  } catch (const YAML::Exception& e) {
    throw Error(e.msg, fmt::format("{}:{}", path, e.mark.line + 1), "fix the YAML syntax");
  }
  const fs::path dir = fs::path(path).parent_path();
  auto resolve = [&](const std::string& p) {
    return fs::path(p).is_absolute() ? p : (dir / p).lexically_normal().string();
  };
  if (!root["base"]) throw Error("missing key \"base\"", path, "name the base config file");
  const std::string base = resolve(root["base"].as<std::string>());
  std::map<std::string, std::string> base_for;
  if (root["base_for"]) {
    if (!root["base_for"].IsMap())
      throw Error("\"base_for\" must map topology -> config file", path, "see configs/sweeps/");
    for (const auto& kv : root["base_for"])
      base_for[kv.first.as<std::string>()] = resolve(kv.second.as<std::string>());
  }
  const std::string save_root = root["save_root"] ? root["save_root"].as<std::string>() : "runs/sweep";
  const auto topologies = list<std::string>(root, "topologies", path, true);
  const auto lrs = list<double>(root, "learning_rates", path, true);
  const auto seeds = seed_override.empty() ? list<int64_t>(root, "seeds", path, false) : seed_override;
  const auto overrides = list<std::string>(root, "overrides", path, false);

  Sweep sweep{path, {}};
  std::vector<std::optional<int64_t>> seed_list(seeds.begin(), seeds.end());
  if (seed_list.empty()) seed_list.push_back(std::nullopt);
  for (size_t i = 0; i < topologies.size(); ++i) {
    const Variant variant =
        parse_variant(topologies[i], fmt::format("{}:{}", path, root["topologies"][i].Mark().line + 1));
    for (double lr : lrs)
      for (const auto& seed : seed_list) {
        SweepRun r;
        r.name = fmt::format("{}-lr{}{}", variant.name, lr_text(lr), seed ? fmt::format("-s{}", *seed) : "");
        r.base = base_for.count(variant.topology) ? base_for[variant.topology] : base;
        r.overrides = overrides;
        r.overrides.insert(r.overrides.end(), variant.overrides.begin(), variant.overrides.end());
        r.overrides.push_back("--model.residual=" + variant.topology);
        r.overrides.push_back(fmt::format("--optimizer.learning_rate={}", lr_text(lr)));
        if (seed) r.overrides.push_back(fmt::format("--seed={}", *seed));
        r.overrides.push_back("--run_name=" + r.name);
        r.save_folder = (fs::path(save_root) / r.name).string();
        r.overrides.push_back("--save_folder=" + r.save_folder);
        sweep.runs.push_back(std::move(r));
      }
  }
  return sweep;
}

}  // namespace siamese::runs
