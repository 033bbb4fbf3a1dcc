#include "siamese/runs/sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/common/user_path.h"
#include "siamese/config/schema.h"
#include "siamese/train/step_reporter.h"

namespace siamese::runs {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kSweepKeys = {"base",           "base_for", "save_root", "topologies",
                                             "learning_rates", "seeds",    "overrides", "decay_branches"};

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

// A key whose value is one word (a file, a folder): a list or a mapping there is named with
// its line, not yaml-cpp's "bad conversion".
std::string scalar(const YAML::Node& n, const std::string& key, const std::string& path,
                   const std::string& fix) {
  if (!n.IsScalar())
    throw Error(fmt::format("\"{}\" must be one value, not {}", key,
                            n.IsSequence() ? "a list"
                            : n.IsMap()    ? "a mapping"
                                           : "empty"),
                line_of(path, n), fix);
  return n.as<std::string>();
}

// The shortest text that reads back as the same double ({:g} rounded to 6 digits, so
// 0.0012345678 and 0.0012345679 named one run and trained at 0.00123457).
std::string lr_text(double lr) { return fmt::format("{}", lr); }

// The keys expand_sweep sets for every run; the fix names the list that sets each.
struct SweptKey {
  const char* key;
  const char* fix;
};
const SweptKey kSweptKeys[] = {
    {"model.residual", "list the topology in topologies (--topologies)"},
    {"optimizer.learning_rate", "list the learning rate in learning_rates (--lr)"},
    {"seed", "list the seed in seeds (--seeds), or drop the seeds list to set one seed for every run"},
    {"run_name", "leave it out: the sweep names each run after its settings"},
    {"save_folder", "set save_root (--out): each run's folder is save_root/<run name>"},
};

std::string override_key(const std::string& o) {
  const std::string s = o.rfind("--", 0) == 0 ? o.substr(2) : o;
  return s.substr(0, s.find('='));
}

// `shown`: the override, or the variant entry that holds it.
void refuse_swept_key(const std::string& override, const std::string& shown, const SweepSpec& spec,
                      const std::string& where) {
  const std::string key = override_key(override);
  for (const auto& k : kSweptKeys)
    if (key == k.key && (key != "seed" || !spec.seeds.empty()))
      throw Error(fmt::format("\"{}\" sets {}, which the sweep sets for each run (its value would be "
                              "replaced without a word)",
                              shown, key),
                  where, k.fix);
}

std::string variant_entry(const config::Variant& v) {
  std::string entry = v.topology;
  for (const auto& o : v.overrides) entry += ":" + o.substr(2);
  return entry;
}

// Run names become folder names, Slurm job names and words of launch scripts.
void check_name(const std::string& name, const std::string& entry, const std::string& where) {
  const auto bad =
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+=,-");
  if (bad == std::string::npos && !name.empty() && name[0] != '.') return;
  const std::string shown = bad == std::string::npos ? "a leading \".\""
                            : std::isprint(static_cast<unsigned char>(name[bad]))
                                ? fmt::format("\"{}\"", name[bad])
                                : fmt::format("byte 0x{:02x}", static_cast<unsigned char>(name[bad]));
  throw Error(fmt::format("topologies entry \"{}\" names its runs \"{}\", which has {}: run names become "
                          "folder names and Slurm job names",
                          entry, name, shown),
              where,
              "keep the values of a variant to letters, digits and . _ + = , -; a value such as a path "
              "goes in --set (overrides) of a sweep of its own, with its own --out");
}

// Each variant's name (config/variant.h: the topology, then "+value" per override), except
// where two variants of the sweep share one, as pre:max_duration=3 and pre:scheduler.t_warmup=3
// do: those are named by every setting they set ("+key=value"). A name then changes only
// when a variant it collides with joins the sweep. Two variants that set the same values are
// one run listed twice.
std::vector<std::string> variant_names(const std::vector<config::Variant>& variants,
                                       const std::string& where) {
  std::map<std::string, int> uses;
  for (const auto& v : variants) ++uses[v.name];
  std::vector<std::string> names;
  std::map<std::string, std::string> settings_seen;  // topology and sorted overrides -> entry
  for (const auto& v : variants) {
    auto sorted = v.overrides;
    std::sort(sorted.begin(), sorted.end());
    const std::string settings = fmt::format("{} {}", v.topology, fmt::join(sorted, " "));
    if (const auto [it, fresh] = settings_seen.emplace(settings, variant_entry(v)); !fresh)
      throw Error(fmt::format("topologies lists \"{}\" and \"{}\", the same settings twice: both would train "
                              "in one folder",
                              it->second, variant_entry(v)),
                  where, "list each topology or variant once");
    std::string name = v.name;
    if (uses[v.name] > 1) {
      name = v.topology;
      for (const auto& o : v.overrides) name += "+" + o.substr(2);
    }
    check_name(name, variant_entry(v), where);
    names.push_back(name);
  }
  return names;
}

template <typename T, typename Text>
void refuse_repeats(const std::vector<T>& values, Text text, const char* what, const std::string& where) {
  std::set<std::string> seen;
  for (const auto& v : values)
    if (!seen.insert(text(v)).second)
      throw Error(fmt::format("{} {} is listed twice: both runs would train in one folder", what, text(v)),
                  where, fmt::format("list each {} once", what));
}

// The branch run of `stable` at `b`: its settings, from its checkpoint at b.at, with a decay
// of b.steps, in the folder decay_branch names by default (RUN_decayN+K).
SweepRun branch_of(const SweepRun& stable, const SweepSpec::Branch& b, const std::string& save_root) {
  SweepRun r;
  r.name = fmt::format("{}_decay{}+{}", stable.name, b.at, b.steps);
  r.base = stable.base;
  for (const auto& o : stable.overrides)
    if (override_key(o) != "run_name" && override_key(o) != "save_folder") r.overrides.push_back(o);
  r.overrides.push_back(fmt::format("--decay_from={}/step{}", stable.save_folder, b.at));
  r.overrides.push_back(fmt::format("--scheduler.t_decay={}", b.steps));
  r.overrides.push_back("--run_name=" + r.name);
  r.save_folder = (fs::path(save_root) / r.name).string();
  r.overrides.push_back("--save_folder=" + r.save_folder);
  r.parent = stable.name;
  r.branch_at = b.at;
  return r;
}

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
  spec.base = resolve(scalar(root["base"], "base", path,
                             "name one base config (base: ../tiny/base.yaml); a topology's own goes under "
                             "base_for: {hybrid_pre: ../tiny/hybrid.yaml}"));
  if (root["base_for"]) {
    if (!root["base_for"].IsMap())
      throw Error("\"base_for\" must map topology -> config file", line_of(path, root["base_for"]),
                  "see configs/sweeps/");
    for (const auto& kv : root["base_for"]) {
      const auto topology = scalar(kv.first, "base_for", path, "write base_for: {TOPOLOGY: FILE, ...}");
      spec.base_for[topology] =
          resolve(scalar(kv.second, "base_for." + topology, path, "name one config file for each topology"));
    }
  }
  if (root["save_root"])
    spec.save_root = scalar(root["save_root"], "save_root", path, "name one folder for the sweep's runs");
  const auto topologies = list<std::string>(root, "topologies", path, true);
  for (size_t i = 0; i < topologies.size(); ++i)
    spec.topologies.push_back(config::parse_variant(topologies[i], line_of(path, root["topologies"][i])));
  spec.learning_rates = list<double>(root, "learning_rates", path, true);
  spec.seeds = list<int64_t>(root, "seeds", path, false);
  spec.overrides = list<std::string>(root, "overrides", path, false);
  for (const auto& b : list<std::string>(root, "decay_branches", path, false))
    spec.decay_branches.push_back(parse_branch(b, line_of(path, root["decay_branches"])));
  for (const char* key : {"topologies", "learning_rates", "seeds", "decay_branches"})
    if (root[key]) spec.where[key] = line_of(path, root[key]);
  for (size_t i = 0; i < spec.overrides.size(); ++i)
    spec.where[spec.overrides[i]] = line_of(path, root["overrides"][i]);
  return spec;
}

Sweep expand_sweep(const SweepSpec& spec, const std::string& path) {
  const auto where = [&](const std::string& key) {
    const auto it = spec.where.find(key);
    return it == spec.where.end() ? path : it->second;
  };
  for (const auto& o : spec.overrides) refuse_swept_key(o, o, spec, where(o));
  for (const auto& v : spec.topologies)
    for (const auto& o : v.overrides) refuse_swept_key(o, variant_entry(v), spec, where("topologies"));
  const std::vector<std::string> names = variant_names(spec.topologies, where("topologies"));
  refuse_repeats(
      spec.learning_rates, [](double lr) { return lr_text(lr); }, "learning rate", where("learning_rates"));
  refuse_repeats(
      spec.seeds, [](int64_t s) { return std::to_string(s); }, "seed", where("seeds"));
  refuse_repeats(
      spec.decay_branches, [](const SweepSpec::Branch& b) { return fmt::format("{}:{}", b.at, b.steps); },
      "decay branch", where("decay_branches"));
  Sweep sweep{path, spec.save_root, {}};
  std::vector<std::optional<int64_t>> seed_list(spec.seeds.begin(), spec.seeds.end());
  if (seed_list.empty()) seed_list.push_back(std::nullopt);
  std::map<std::string, std::string> named;  // run name -> its variant entry
  for (size_t v = 0; v < spec.topologies.size(); ++v)
    for (double lr : spec.learning_rates)
      for (const auto& seed : seed_list) {
        const config::Variant& variant = spec.topologies[v];
        SweepRun r;
        r.name = fmt::format("{}-lr{}{}", names[v], lr_text(lr), seed ? fmt::format("-s{}", *seed) : "");
        // Variant values may spell another variant's name with its learning rate in it.
        if (const auto [it, fresh] = named.emplace(r.name, variant_entry(variant)); !fresh)
          throw Error(fmt::format("topologies entries \"{}\" and \"{}\" both name a run \"{}\"", it->second,
                                  variant_entry(variant), r.name),
                      where("topologies"), "give the variants values that tell them apart");
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
        const SweepRun stable = r;
        sweep.runs.push_back(std::move(r));
        for (const auto& b : spec.decay_branches) sweep.runs.push_back(branch_of(stable, b, spec.save_root));
      }
  return sweep;
}

SweepSpec::Branch parse_branch(const std::string& text, const std::string& where) {
  const auto colon = text.find(':');
  SweepSpec::Branch b;
  try {
    size_t used = 0;
    if (colon == std::string::npos) throw std::invalid_argument(text);
    b.at = std::stoll(text.substr(0, colon), &used);
    if (used != colon) throw std::invalid_argument(text);
    b.steps = std::stoll(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    throw Error(
        fmt::format("decay branch \"{}\" is not N:K", text), where,
        "give the stable run's step and the decay's steps, e.g. 250:50 (a decay of 50 steps from step "
        "250)");
  }
  if (b.at <= 0 || b.steps <= 0)
    throw Error(fmt::format("decay branch \"{}\" needs a positive step and length", text), where,
                "e.g. 250:50");
  return b;
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
  const auto record = read_sweep_record(argument);
  if (record)
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
  // A sweep killed before its first run has only sweep.json: reported as one run named after
  // the folder, it read as a run of that name that never started.
  if (out.empty() && record) {
    std::vector<std::string> named(record->runs.begin(),
                                   record->runs.begin() + std::min<std::ptrdiff_t>(record->runs.size(), 3));
    if (record->runs.size() > named.size()) named.push_back("...");
    throw Error(fmt::format("the sweep recorded here has started none of its {} runs (no run folder yet: {})",
                            record->runs.size(), fmt::join(named, ", ")),
                argument,
                "run the sweep (`siamese sweep ... --out " + argument +
                    "`) and report once a run has started; its folder appears then");
  }
  // A folder that holds no runs is a run that never started.
  return out.empty() ? std::vector<std::string>{argument} : out;
}

std::string time_left_text(int finished, int total, double elapsed_seconds, double estimated_seconds) {
  if (finished <= 0 && estimated_seconds > 0)
    return fmt::format("about {} left by the measured steps",
                       train::format_eta(std::max(0.0, estimated_seconds - elapsed_seconds)));
  if (finished <= 0) return "time left known after the first run";
  const double left = elapsed_seconds / finished * (total - finished);
  return fmt::format("about {} left", train::format_eta(left));
}

}  // namespace siamese::runs
