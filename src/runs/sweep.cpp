#include "siamese/runs/sweep.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/common/user_path.h"
#include "siamese/train/step_reporter.h"

namespace siamese::runs {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kSweepKeys = {"base",           "base_for", "save_root", "topologies",
                                             "learning_rates", "seeds",    "overrides"};

std::string line_of(const std::string& path, const YAML::Node& n) {
  return fmt::format("{}:{}", path, n.Mark().line + 1);
}

// A typo usually keeps the start of the key (seed, override, topology, learning_rate).
std::string unknown_key_fix(const std::string& key) {
  std::string best;
  size_t best_shared = 2;  // fewer shared characters suggest nothing
  for (const auto& k : kSweepKeys) {
    size_t shared = 0;
    while (shared < std::min(k.size(), key.size()) && k[shared] == key[shared]) ++shared;
    if (shared > best_shared) {
      best_shared = shared;
      best = k;
    }
  }
  std::string keys;
  for (const auto& k : kSweepKeys) keys += (keys.empty() ? "" : ", ") + k;
  return (best.empty() ? "" : "did you mean \"" + best + "\"? ") + "a sweep file takes only " + keys;
}

template <typename T>
std::vector<T> list(const YAML::Node& root, const std::string& key, const std::string& path, bool required) {
  const YAML::Node n = root[key];
  if (!n) {
    if (required) throw Error(fmt::format("missing key \"{}\"", key), path, "see configs/sweeps/");
    return {};
  }
  if (!n.IsSequence() || n.size() == 0)
    throw Error(fmt::format("\"{}\" must be a non-empty list", key), line_of(path, n),
                "write it as [a, b, ...]");
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

SweepSpec read_sweep_file(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error("cannot read sweep file", path, "check the path");
  } catch (const YAML::Exception& e) {
    throw Error(e.msg, fmt::format("{}:{}", path, e.mark.line + 1), "fix the YAML syntax");
  }
  if (!root.IsMap()) throw Error("a sweep file is a mapping of keys", path, "see configs/sweeps/");
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    if (std::find(kSweepKeys.begin(), kSweepKeys.end(), key) == kSweepKeys.end())
      throw Error(fmt::format("unknown key \"{}\"", key), line_of(path, kv.first), unknown_key_fix(key));
  }
  const fs::path dir = fs::path(path).parent_path();
  auto resolve = [&](const std::string& p) {
    return fs::path(p).is_absolute() ? p : (dir / p).lexically_normal().string();
  };
  SweepSpec spec;
  if (!root["base"]) throw Error("missing key \"base\"", path, "name the base config file");
  spec.base = resolve(root["base"].as<std::string>());
  if (root["base_for"]) {
    if (!root["base_for"].IsMap())
      throw Error("\"base_for\" must map topology -> config file", line_of(path, root["base_for"]),
                  "see configs/sweeps/");
    for (const auto& kv : root["base_for"])
      spec.base_for[kv.first.as<std::string>()] = resolve(kv.second.as<std::string>());
  }
  if (root["save_root"]) spec.save_root = root["save_root"].as<std::string>();
  const auto topologies = list<std::string>(root, "topologies", path, true);
  for (size_t i = 0; i < topologies.size(); ++i)
    spec.topologies.push_back(config::parse_variant(topologies[i], line_of(path, root["topologies"][i])));
  spec.learning_rates = list<double>(root, "learning_rates", path, true);
  spec.seeds = list<int64_t>(root, "seeds", path, false);
  spec.overrides = list<std::string>(root, "overrides", path, false);
  return spec;
}

Sweep expand_sweep(const SweepSpec& spec, const std::string& path) {
  Sweep sweep{path, spec.save_root, {}};
  std::vector<std::optional<int64_t>> seed_list(spec.seeds.begin(), spec.seeds.end());
  if (seed_list.empty()) seed_list.push_back(std::nullopt);
  for (const config::Variant& variant : spec.topologies)
    for (double lr : spec.learning_rates)
      for (const auto& seed : seed_list) {
        SweepRun r;
        r.name = fmt::format("{}-lr{}{}", variant.name, lr_text(lr), seed ? fmt::format("-s{}", *seed) : "");
        const auto own = spec.base_for.find(variant.topology);
        r.base = own != spec.base_for.end() ? own->second : spec.base;
        r.overrides = spec.overrides;
        r.overrides.insert(r.overrides.end(), variant.overrides.begin(), variant.overrides.end());
        r.overrides.push_back("--model.residual=" + variant.topology);
        r.overrides.push_back(fmt::format("--optimizer.learning_rate={}", lr_text(lr)));
        if (seed) r.overrides.push_back(fmt::format("--seed={}", *seed));
        r.overrides.push_back("--run_name=" + r.name);
        r.save_folder = (fs::path(spec.save_root) / r.name).string();
        r.overrides.push_back("--save_folder=" + r.save_folder);
        sweep.runs.push_back(std::move(r));
      }
  return sweep;
}

Sweep load_sweep(const std::string& path) { return expand_sweep(read_sweep_file(path), path); }

std::string override_from_setting(const std::string& setting, const std::string& where) {
  const std::string s = setting.rfind("--", 0) == 0 ? setting.substr(2) : setting;
  const auto eq = s.find('=');
  if (eq == 0 || eq == std::string::npos)
    throw Error(fmt::format("\"{}\" is not a setting", setting), where,
                "write dotted.key=value, e.g. --set max_duration=20 --set model.n_layers=4");
  return "--" + s;
}

std::optional<SweepRecord> read_sweep_record(const std::string& save_root) {
  const fs::path path = fs::path(save_root) / kSweepRecord;
  if (!fs::is_regular_file(path)) return std::nullopt;
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("runs") || !j["runs"].is_array())
    throw Error("not a sweep record", path.string(),
                "delete it; the next `siamese sweep` into this folder writes it again");
  SweepRecord record;
  for (const auto& run : j["runs"]) {
    const std::string name = run.value("name", "");
    if (name.empty()) continue;
    record.runs.push_back(name);
    if (run.contains("jobs") && run["jobs"].is_number_integer()) record.jobs[name] = run["jobs"].get<int>();
  }
  return record;
}

void record_sweep(const std::string& save_root, const std::vector<std::string>& runs,
                  const std::vector<std::string>& trained, int jobs) {
  SweepRecord record = read_sweep_record(save_root).value_or(SweepRecord{});
  for (const auto& name : runs)
    if (std::find(record.runs.begin(), record.runs.end(), name) == record.runs.end())
      record.runs.push_back(name);
  // A run resumed under other --jobs trained partly alongside others: the larger count holds.
  for (const auto& name : trained) record.jobs[name] = std::max(record.jobs[name], jobs);
  auto list = nlohmann::json::array();
  for (const auto& name : record.runs) {
    nlohmann::json run = {{"name", name}};
    if (record.jobs.count(name)) run["jobs"] = record.jobs.at(name);
    list.push_back(run);
  }
  create_folder(save_root, "the sweep's save_root (--out)");
  write_file_atomically(fs::path(save_root) / kSweepRecord, nlohmann::json{{"runs", list}}.dump(2) + "\n");
}

std::vector<std::string> report_folders(const std::string& argument) {
  const fs::path folder(argument);
  if (!fs::is_directory(folder) || fs::exists(folder / "metrics.jsonl")) return {argument};
  std::vector<std::string> out;
  std::set<std::string> listed;
  if (const auto record = read_sweep_record(argument))
    for (const auto& name : record->runs) {
      listed.insert(name);
      // A run not started yet has no folder: the report is of what exists.
      if (fs::is_directory(folder / name)) out.push_back((folder / name).string());
    }
  std::vector<std::string> others;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.is_directory() && !listed.count(e.path().filename().string()) &&
        fs::exists(e.path() / "metrics.jsonl"))
      others.push_back(e.path().string());
  std::sort(others.begin(), others.end());
  out.insert(out.end(), others.begin(), others.end());
  // A folder that holds no runs is a run that never started.
  return out.empty() ? std::vector<std::string>{argument} : out;
}

std::string time_left_text(int finished, int total, double elapsed_seconds) {
  if (finished <= 0) return "time left known after the first run";
  const double left = elapsed_seconds / finished * (total - finished);
  return fmt::format("about {} left", train::format_eta(left));
}

}  // namespace siamese::runs
