#include "siamese/runs/run_summary.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "siamese/common/error.h"
#include "siamese/common/metrics_row.h"
#include "siamese/common/step_folder.h"
#include "siamese/config/duration.h"
#include "siamese/config/load.h"
#include "siamese/config/schema.h"
#include "siamese/model/accounting.h"
#include "siamese/runs/stats.h"
#include "siamese/runs/sweep.h"
#include "siamese/train/save_folder.h"

namespace siamese::runs {

namespace fs = std::filesystem;

namespace {

// The newest step<N>/config.yaml of a run, else the run's config written at the start of
// training (train/save_folder.h), so a run that diverged before any checkpoint has one too.
std::optional<fs::path> latest_config(const fs::path& run) {
  std::optional<fs::path> best;
  int64_t best_step = -1;
  if (!fs::is_directory(run)) return best;
  for (const auto& e : fs::directory_iterator(run)) {
    const auto step = step_of_folder(e.path().filename().string());
    if (e.is_directory() && step && fs::exists(e.path() / "config.yaml") && *step > best_step) {
      best_step = *step;
      best = e.path() / "config.yaml";
    }
  }
  return best ? best : train::run_config_path(run);
}

// The first key of a row whose value has a type no writer of metrics.jsonl gives it (a hand
// edit, a bad merge), or "" for a good row. Such a row is skipped: read as it is, a loss of
// "abc" would count as a divergence, and a step of "abc" would stop the report with a type
// error.
std::string damaged_key(const nlohmann::json& j) {
  using json = nlohmann::json;
  namespace k = metric;
  auto integer = [](const json& v) { return v.is_number_integer(); };
  auto number = [](const json& v) { return v.is_number() || v.is_null(); };  // null: non-finite
  auto text = [](const json& v) { return v.is_string(); };
  auto flag = [](const json& v) { return v.is_boolean(); };
  const std::vector<std::pair<const char*, std::function<bool(const json&)>>> types = {
      {k::kStep, integer},        {k::kEvent, text},         {k::kTokens, integer},   {k::kLoss, number},
      {k::kLearningRate, number}, {k::kStepSeconds, number}, {k::kLossSpike, flag},   {k::kLabel, text},
      {k::kPerplexity, number},   {k::kExactMatch, number},  {k::kEvalLimit, integer}};
  for (const auto& [key, fits] : types)
    if (j.contains(key) && !fits(j[key])) return key;
  for (const auto& [key, value] : j.items())
    if (key.rfind(k::kDownstreamPrefix, 0) == 0 && !number(value)) return key;
  if (j.contains("changed")) {
    if (!j["changed"].is_object()) return "changed";
    for (const auto& [key, change] : j["changed"].items())
      if (!change.is_object() || !change.value("was", json("")).is_string() ||
          !change.value("now", json("")).is_string())
        return "changed";
  }
  return "";
}

// One good row of metrics.jsonl into `s`; `recent` holds the last training losses.
void read_row(const nlohmann::json& j, const SummaryOptions& options, RunSummary& s,
              std::deque<double>& recent) {
  namespace k = metric;
  const std::string event = j.value(k::kEvent, "");
  if (event == k::kNonfiniteEvent) {
    s.nonfinite = true;
    if (!s.nonfinite_step) s.nonfinite_step = j.value(k::kStep, int64_t(0));
  } else if (event == k::kResumeEvent && j.contains("changed") && j["changed"].is_object()) {
    RunSummary::Resume resume{j.value(k::kStep, int64_t(0)), {}};
    for (const auto& [key, change] : j["changed"].items())
      resume.changed.push_back({key, change.value("was", ""), change.value("now", "")});
    s.resumes.push_back(resume);
  } else if (event == k::kEvalEvent) {
    if (j.contains(k::kLabel) && j.contains(k::kPerplexity) && j[k::kPerplexity].is_number())
      s.eval_perplexity[j[k::kLabel].get<std::string>()] = j[k::kPerplexity].get<double>();
    if (j.contains(k::kLabel) && j.contains(k::kExactMatch) && j[k::kExactMatch].is_number())
      s.eval_exact_match[j[k::kLabel].get<std::string>()] = j[k::kExactMatch].get<double>();
  } else if (event.empty() && j.contains(k::kLoss) && j.contains(k::kLearningRate)) {
    s.steps = j.value(k::kStep, int64_t(0));
    s.tokens = j.value(k::kTokens, int64_t(0));
    if (!j[k::kLoss].is_number()) {
      s.nonfinite = true;
      if (!s.nonfinite_step) s.nonfinite_step = s.steps;
    } else {
      if (std::isnan(s.initial_loss)) s.initial_loss = j[k::kLoss].get<double>();
      recent.push_back(j[k::kLoss].get<double>());
      if (int64_t(recent.size()) > options.final_window) recent.pop_front();
    }
    if (j.value(k::kLossSpike, false)) ++s.spikes;
    if (j.contains(k::kStepSeconds) && j[k::kStepSeconds].is_number()) {
      s.train_seconds += j[k::kStepSeconds].get<double>();
      ++s.timed_steps;
    }
  }
  const bool limited = j.contains(k::kEvalLimit) && j[k::kEvalLimit].is_number_integer();
  for (const auto& [key, value] : j.items())
    if (key.rfind(k::kDownstreamPrefix, 0) == 0 && value.is_number() &&
        key.find(k::kDocumentsSuffix) == std::string::npos) {
      s.downstream[key] = value.get<double>();
      if (limited)
        s.downstream_limit[key] = j[k::kEvalLimit].get<int64_t>();
      else
        s.downstream_limit.erase(key);  // a full evaluation after a limited one
    }
}

// "FILE:12 (loss is \"abc\"), FILE:40 (...)": the damaged rows a summary names.
std::string damaged_text(const RunSummary& s) {
  std::vector<std::string> named;
  for (const auto& d : s.damaged)
    named.push_back(fmt::format("{}:{} ({} is {})", s.metrics_path, d.line, d.key, d.value));
  if (s.damaged_rows > int64_t(s.damaged.size()))
    named.push_back(fmt::format("{} more", s.damaged_rows - int64_t(s.damaged.size())));
  return fmt::format("{}", fmt::join(named, ", "));
}

constexpr size_t kDamagedNamed = 5;

void read_metrics(const fs::path& metrics, const SummaryOptions& options, RunSummary& s) {
  std::deque<double> recent;
  s.metrics_path = metrics.string();
  read_metrics_rows(metrics.string(), [&](const nlohmann::json& j, const std::string&, int64_t line) {
    if (const std::string key = damaged_key(j); !key.empty()) {
      ++s.damaged_rows;
      if (s.damaged.size() < kDamagedNamed) {
        std::string value = j[key].dump();
        if (value.size() > 40) value = value.substr(0, 37) + "...";
        s.damaged.push_back({line, key, value});
      }
      return;
    }
    read_row(j, options, s, recent);
  });
  if (s.damaged_rows)
    spdlog::warn(
        "{}: skipped {} damaged row{} (a value of the wrong type): {}; the state and losses are of the "
        "other rows. fix: repair or remove those lines",
        metrics.string(), s.damaged_rows, s.damaged_rows == 1 ? "" : "s", damaged_text(s));
  if (!recent.empty()) {
    double sum = 0;
    for (double v : recent) sum += v;
    s.final_loss = sum / double(recent.size());
  }
}

}  // namespace

RunSummary summarize_run(const std::string& run_dir, const SummaryOptions& options) {
  RunSummary s;
  s.run = run_dir;
  if (!fs::is_directory(run_dir))
    throw Error("no such run folder", run_dir, "pass save_folder of runs written by `siamese train`");
  const fs::path metrics = fs::path(run_dir) / "metrics.jsonl";
  if (fs::exists(metrics)) read_metrics(metrics, options, s);
  s.diverge_threshold = options.diverge_loss.value_or(s.initial_loss);
  s.diverged = s.nonfinite || (std::isfinite(s.final_loss) && s.final_loss > s.diverge_threshold);
  if (const fs::path record = fs::path(run_dir) / "run.json"; fs::exists(record)) {
    std::ifstream in(record);
    const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("max_steps") && j["max_steps"].is_number_integer())
      s.max_steps = j["max_steps"].get<int64_t>();
    if (j.is_object() && j.contains("host") && j["host"].is_string()) s.host = j["host"].get<std::string>();
    if (j.is_object() && j.contains("intra_op_threads") && j["intra_op_threads"].is_number_integer())
      s.intra_op_threads = j["intra_op_threads"].get<int64_t>();
    if (j.is_object() && j.contains("cpu") && j["cpu"].is_string()) s.cpu = j["cpu"].get<std::string>();
  }
  if (auto cfg = latest_config(run_dir)) {
    // The saved config is the resolved one: read it through the schema like any config.
    const config::TrainConfig c = config::load_config(cfg->string(), {});
    // Runs written before run.json existed: a max_duration in plain steps is the plan too.
    const config::Duration& planned = c.max_duration;
    if (!s.max_steps && planned.unit() == config::Duration::Steps) s.max_steps = planned.value();
    s.topology = c.model.residual;
    s.flops_per_token = model::flops_per_token(c.model, c.model.max_sequence_length);
    for (const auto& field : config::schema::train_fields())
      s.settings[field.key] = config::schema::value_text(field, c);
    s.learning_rate = c.optimizer.learning_rate;
    s.seed = c.seed;
  }
  for (const auto& resume : s.resumes)
    for (const auto& change : resume.changed)
      if (change.key == "optimizer.learning_rate" && s.learning_rate) {
        s.learning_rate = std::stod(change.was);
        break;
      }
  fs::path folder = fs::path(run_dir).lexically_normal();
  if (folder.filename().empty()) folder = folder.parent_path();  // "runs/x/"
  if (s.topology.empty()) s.topology = folder.filename().string();
  s.model = s.topology;
  if (const auto record = read_sweep_record(folder.parent_path().string()))
    if (const auto it = record->jobs.find(folder.filename().string()); it != record->jobs.end())
      s.concurrent_runs = it->second;
  return s;
}

namespace {

// A setting as a model's label names it: its key without the "model." every model key has.
std::string model_label_key(const std::string& key) {
  return key.rfind("model.", 0) == 0 ? key.substr(std::string("model.").size()) : key;
}

}  // namespace

void name_models(std::vector<RunSummary>& runs) {
  static const std::set<std::string> per_run = {"seed",     "data.seed",   "optimizer.learning_rate",
                                                "run_name", "save_folder", "model.residual"};
  // A decay branch (train/decay_branch.h) differs from its stable run in these by construction:
  // it is labelled by where it branched instead ("pre decay250+50"), and they name no model.
  static const std::set<std::string> branch_keys = {"decay_from", "load_path", "max_duration",
                                                    "scheduler.t_decay"};
  const auto branch = [](const RunSummary& r) {
    const auto it = r.settings.find("decay_from");
    return it != r.settings.end() && !it->second.empty();
  };
  std::map<std::string, std::map<std::string, std::set<std::string>>> values;  // topology -> key -> values
  for (const auto& r : runs)
    for (const auto& [key, value] : r.settings)
      if (!per_run.count(key) && !(branch(r) && branch_keys.count(key)))
        values[r.topology][key].insert(value);
  std::set<std::string> telling;
  for (const auto& [topology, keys] : values)
    for (const auto& [key, seen] : keys)
      if (seen.size() > 1) telling.insert(key);
  // The value most runs share reads as the baseline and is left out (first seen on ties).
  std::map<std::string, std::string> baseline;
  for (const auto& key : telling) {
    std::map<std::string, int> count;
    int best = 0;
    for (const auto& r : runs)
      if (auto it = r.settings.find(key); it != r.settings.end() && ++count[it->second] > best) {
        best = count[it->second];
        baseline[key] = it->second;
      }
  }
  for (auto& r : runs) {
    r.model = r.topology;
    for (const auto& field : config::schema::train_fields())
      if (telling.count(field.key) && r.settings.count(field.key) &&
          r.settings[field.key] != baseline[field.key] && !(branch(r) && branch_keys.count(field.key)))
        r.model += " " + model_label_key(field.key) + "=" + r.settings[field.key];
    if (branch(r)) {
      const std::string from = fs::path(r.settings["decay_from"]).lexically_normal().filename().string();
      r.model += " decay" + (from.rfind("step", 0) == 0 ? from.substr(4) : from) + "+" +
                 r.settings["scheduler.t_decay"];
    }
  }
}

namespace {

// Header cells for each lm evaluator's perplexity and each exact-match evaluator.
void add_eval_columns(std::string& header, std::string& rule, const std::set<std::string>& evals,
                      const std::set<std::string>& exact) {
  for (const auto& e : evals) {
    header += " " + e + " PPL |";
    rule += "---:|";
  }
  for (const auto& e : exact) {
    header += " " + e + " exact % |";
    rule += "---:|";
  }
}

}  // namespace

std::string state_text(const RunSummary& r) {
  if (r.steps == 0 && !r.nonfinite) return "never started";
  if (r.nonfinite_step) return fmt::format("diverged at step {}", *r.nonfinite_step);
  if (r.diverged)
    return fmt::format("diverged (final loss {:.2f} > {:.2f})", r.final_loss, r.diverge_threshold);
  if (!r.max_steps) return fmt::format("{} steps", r.steps);
  if (r.steps >= *r.max_steps) return "finished";
  return fmt::format("stopped at {} of {}", r.steps, *r.max_steps);
}

double tokens_per_second(const RunSummary& r) {
  if (r.train_seconds <= 0 || r.steps <= 0) return NAN;
  return double(r.tokens) / double(r.steps) * double(r.timed_steps) / r.train_seconds;
}

namespace {

// What the marks of markdown_table mean, for the runs that have them.
std::string table_notes(const std::vector<RunSummary>& runs) {
  std::string notes;
  std::set<int> jobs;
  std::set<int64_t> limits;
  for (const auto& r : runs) {
    if (r.concurrent_runs.value_or(1) > 1) jobs.insert(*r.concurrent_runs);
    for (const auto& [key, limit] : r.downstream_limit) limits.insert(limit);
  }
  if (!jobs.empty())
    notes += fmt::format(
        "\nsteps/s: left out for runs a sweep trained {} at once (`--jobs`): they shared the cores, so "
        "their speed is not the topology's (the CSV and JSON keep it, with concurrent_runs).\n",
        fmt::join(jobs, " or "));
  // Where the numbers were made: the same command on another CPU or thread count takes other
  // kernels and ends at other digits (docs/results.md, "What varies between machines").
  std::map<std::string, int> machines;
  for (const auto& r : runs)
    if (!r.cpu.empty() && r.intra_op_threads)
      ++machines[fmt::format("{}, {} thread{}", r.cpu, *r.intra_op_threads,
                             *r.intra_op_threads == 1 ? "" : "s")];
  if (!machines.empty()) {
    std::vector<std::string> parts;
    for (const auto& [machine, n] : machines)
      parts.push_back(fmt::format("{} ({} run{})", machine, n, n == 1 ? "" : "s"));
    notes += fmt::format("\nMeasured on: {}.\n", fmt::join(parts, "; "));
  }
  if (!limits.empty())
    notes += fmt::format(
        "\n†: from `siamese eval --limit {}`, the first documents of each task only: not comparable with "
        "full evaluations.\n",
        fmt::join(limits, " / "));
  // Runs resumed with other settings: the LR column is the first segment's; here is the rest.
  std::string resumed;
  for (const auto& r : runs)
    for (const auto& resume : r.resumes)
      for (const auto& c : resume.changed)
        resumed += fmt::format("- {}: {} {} -> {} from step {}\n", r.run, c.key, c.was, c.now, resume.step);
  if (!resumed.empty()) notes += "\nResumed with changed settings:\n" + resumed;
  std::string damaged;
  for (const auto& r : runs)
    if (r.damaged_rows) damaged += "- " + damaged_text(r) + "\n";
  if (!damaged.empty())
    notes += "\nDamaged rows skipped (a value of the wrong type; state and losses are of the other rows):\n" +
             damaged;
  return notes;
}

}  // namespace

std::string markdown_table(const std::vector<RunSummary>& runs) {
  std::set<std::string> evals, exact, downstream;
  for (const auto& r : runs) {
    for (const auto& [k, v] : r.eval_perplexity) evals.insert(k);
    for (const auto& [k, v] : r.eval_exact_match) exact.insert(k);
    for (const auto& [k, v] : r.downstream) downstream.insert(k);
  }
  auto short_key = [](const std::string& k) { return k.substr(std::string("eval/downstream/").size()); };
  std::string out = "| Model | LR | seed | steps | tokens | train loss | train PPL |";
  std::string rule = "|---|---:|---:|---:|---:|---:|---:|";
  add_eval_columns(out, rule, evals, exact);
  for (const auto& d : downstream) {
    out += " " + short_key(d) + " |";
    rule += "---:|";
  }
  if (!downstream.empty()) {
    out += " Avg |";
    rule += "---:|";
  }
  out += " steps/s | state |\n" + rule + "---:|---|\n";
  auto num = [](double v, const char* f) {
    return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : std::string("-");
  };
  for (const auto& r : runs) {
    const std::string mark = state_text(r) + (r.spikes ? "*" : "");
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |", r.model,
                       r.learning_rate ? fmt::format("{:g}", *r.learning_rate) : "-",
                       r.seed ? std::to_string(*r.seed) : "-", r.steps, r.tokens,
                       r.diverged ? "diverged" : num(r.final_loss, "{:.3f}"),
                       r.diverged ? "diverged" : num(std::exp(r.final_loss), "{:.2f}"));
    for (const auto& e : evals) {
      auto it = r.eval_perplexity.find(e);
      out += " " +
             (r.diverged || it == r.eval_perplexity.end() ? std::string("-") : num(it->second, "{:.2f}")) +
             " |";
    }
    for (const auto& e : exact) {
      auto it = r.eval_exact_match.find(e);
      out +=
          " " + (it == r.eval_exact_match.end() ? std::string("-") : num(100 * it->second, "{:.1f}")) + " |";
    }
    double sum = 0;
    int n = 0;
    for (const auto& d : downstream) {
      auto it = r.downstream.find(d);
      if (it != r.downstream.end()) {
        sum += it->second;
        ++n;
      }
      const bool limited = r.downstream_limit.count(d) > 0;
      out += " " + (it == r.downstream.end() ? std::string("-") : num(100 * it->second, "{:.1f}")) +
             (limited ? "†" : "") + " |";
    }
    if (!downstream.empty())
      out += " " + (n == int(downstream.size()) ? num(100 * sum / n, "{:.1f}") : std::string("-")) + " |";
    const bool shared = r.concurrent_runs.value_or(1) > 1;
    out += " " +
           (r.train_seconds > 0 && !shared ? num(double(r.timed_steps) / r.train_seconds, "{:.2f}")
                                           : std::string("-")) +
           " |";
    out += fmt::format(" {}{} |\n", mark, r.spikes ? fmt::format(" ({} spikes)", r.spikes) : "");
  }
  return out + table_notes(runs);
}

namespace {

using Spread = MeanInterval;

Spread spread(const std::vector<double>& v) { return mean_interval(v, 0.95); }

// "2.000 [1.122, 2.878]": the mean and its 95% t-interval; the mean alone for one run.
std::string spread_text(const Spread& s, const char* f, double scale = 1.0) {
  if (s.n == 0) return "-";
  auto number = [&](double v) { return fmt::format(fmt::runtime(f), scale * v); };
  return s.low ? fmt::format("{} [{}, {}]", number(s.mean), number(*s.low), number(*s.high)) : number(s.mean);
}

}  // namespace

namespace {

// Runs of one model and learning rate; the spreads are over the runs that did not diverge.
struct SeedGroup {
  std::string model;
  std::optional<double> learning_rate;
  int runs = 0, diverged = 0;
  Spread loss;
  std::map<std::string, Spread> perplexity, exact_match;
};

struct SeedGroups {
  std::vector<SeedGroup> groups;  // in first-seen order, so tables follow the sweep
  std::set<std::string> evals, exact;
};

SeedGroups seed_groups(const std::vector<RunSummary>& runs) {
  SeedGroups out;
  std::vector<std::pair<std::string, std::optional<double>>> keys;
  std::map<std::pair<std::string, std::optional<double>>, std::vector<const RunSummary*>> members;
  for (const auto& r : runs) {
    const auto key = std::make_pair(r.model, r.learning_rate);
    if (!members.count(key)) keys.push_back(key);
    members[key].push_back(&r);
    for (const auto& [k, v] : r.eval_perplexity) out.evals.insert(k);
    for (const auto& [k, v] : r.eval_exact_match) out.exact.insert(k);
  }
  for (const auto& key : keys) {
    SeedGroup g{key.first, key.second, static_cast<int>(members[key].size()), 0, {}, {}, {}};
    std::vector<double> loss;
    std::map<std::string, std::vector<double>> ppl, em;
    for (const auto* r : members[key]) {
      if (r->diverged) {
        ++g.diverged;
        continue;
      }
      if (std::isfinite(r->final_loss)) loss.push_back(r->final_loss);
      for (const auto& [k, v] : r->eval_perplexity) ppl[k].push_back(v);
      for (const auto& [k, v] : r->eval_exact_match) em[k].push_back(v);
    }
    g.loss = spread(loss);
    for (const auto& e : out.evals) g.perplexity[e] = spread(ppl[e]);
    for (const auto& e : out.exact) g.exact_match[e] = spread(em[e]);
    out.groups.push_back(std::move(g));
  }
  return out;
}

std::string lr_cell(const std::optional<double>& lr) { return lr ? fmt::format("{:g}", *lr) : "-"; }

// A CSV field: empty for null, quoted when it holds a comma, a quote or a newline.
std::string csv_cell(const nlohmann::json& v) {
  if (v.is_null()) return std::string();
  std::string text = v.is_string() ? v.get<std::string>() : v.dump();
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

std::string markdown_seed_table(const std::vector<RunSummary>& runs) {
  const SeedGroups all = seed_groups(runs);
  std::string out = "| Model | LR | runs | diverged | train loss |", rule = "|---|---:|---:|---:|---:|";
  add_eval_columns(out, rule, all.evals, all.exact);
  out += "\n" + rule + "\n";
  for (const auto& g : all.groups) {
    out += fmt::format("| {} | {} | {} | {} | {} |", g.model, lr_cell(g.learning_rate), g.runs, g.diverged,
                       spread_text(g.loss, "{:.3f}"));
    for (const auto& e : all.evals) out += " " + spread_text(g.perplexity.at(e), "{:.2f}") + " |";
    for (const auto& e : all.exact) out += " " + spread_text(g.exact_match.at(e), "{:.1f}", 100.0) + " |";
    out += "\n";
  }
  return out;
}

std::string markdown_paired_table(const std::vector<RunSummary>& runs, const std::string& baseline) {
  // The baseline's final losses by learning rate, seed and tokens trained (a ladder's shorter
  // rungs pair with nothing), from the runs that did not diverge.
  std::map<std::tuple<std::optional<double>, int64_t, int64_t>, double> base;
  for (const auto& r : runs)
    if (r.model == baseline && r.seed && !r.diverged && std::isfinite(r.final_loss))
      base[{r.learning_rate, *r.seed, r.tokens}] = r.final_loss;
  std::vector<std::pair<std::string, std::optional<double>>> keys;
  std::map<std::pair<std::string, std::optional<double>>, std::map<int64_t, double>> diffs;
  for (const auto& r : runs) {
    if (r.model == baseline || !r.seed || r.diverged || !std::isfinite(r.final_loss)) continue;
    const auto b = base.find({r.learning_rate, *r.seed, r.tokens});
    if (b == base.end()) continue;
    const auto key = std::make_pair(r.model, r.learning_rate);
    if (!diffs.count(key)) keys.push_back(key);
    diffs[key][*r.seed] = r.final_loss - b->second;
  }
  if (keys.empty()) return "";
  std::string out = fmt::format(
      "Against {}, paired over seeds (final train loss minus {}'s at the same learning rate, seed and "
      "tokens; mean "
      "[95% t-interval]; below 0: lower loss):\n\n| Model | LR | pairs | difference | seeds "
      "|\n|---|---:|---:|---:|---|\n",
      baseline, baseline);
  for (const auto& key : keys) {
    std::vector<double> d;
    std::vector<int64_t> seeds;
    for (const auto& [seed, v] : diffs[key]) {
      seeds.push_back(seed);
      d.push_back(v);
    }
    out += fmt::format("| {} | {} | {} | {} | {} |\n", key.first, lr_cell(key.second), d.size(),
                       spread_text(spread(d), "{:+.4f}"), fmt::join(seeds, ", "));
  }
  return out;
}

std::string seed_csv(const std::vector<RunSummary>& runs) {
  const SeedGroups all = seed_groups(runs);
  std::string out = "model,learning_rate,runs,diverged";
  auto columns = [&](const std::string& metric) {
    for (const char* part : {"_mean", "_sd", "_ci95_low", "_ci95_high", "_n"})
      out += "," + csv_cell(metric + part);
  };
  columns("final_loss");
  for (const auto& e : all.evals) columns("perplexity:" + e);
  for (const auto& e : all.exact) columns("exact_match:" + e);
  out += "\n";
  auto cells = [](const Spread& s) {
    auto optional = [](const std::optional<double>& v) { return csv_cell(finite_or_null(v.value_or(NAN))); };
    return "," + csv_cell(finite_or_null(s.n ? s.mean : NAN)) + "," +
           csv_cell(finite_or_null(s.n > 1 ? s.sd : NAN)) + "," + optional(s.low) + "," + optional(s.high) +
           "," + std::to_string(s.n);
  };
  for (const auto& g : all.groups) {
    out += csv_cell(g.model) + "," +
           csv_cell(g.learning_rate ? nlohmann::json(*g.learning_rate) : nlohmann::json(nullptr)) +
           fmt::format(",{},{}", g.runs, g.diverged) + cells(g.loss);
    for (const auto& e : all.evals) out += cells(g.perplexity.at(e));
    for (const auto& e : all.exact) out += cells(g.exact_match.at(e));
    out += "\n";
  }
  return out;
}

namespace {

nlohmann::json run_json(const RunSummary& r) {
  const auto& number = finite_or_null;
  nlohmann::json j = {
      {"run", r.run},
      {"topology", r.topology},
      {"model", r.model},
      {"learning_rate", r.learning_rate ? nlohmann::json(*r.learning_rate) : nlohmann::json(nullptr)},
      {"seed", r.seed ? nlohmann::json(*r.seed) : nlohmann::json(nullptr)},
      {"state", state_text(r)},
      {"steps", r.steps},
      {"max_steps", r.max_steps ? nlohmann::json(*r.max_steps) : nlohmann::json(nullptr)},
      {"tokens", r.tokens},
      {"initial_loss", number(r.initial_loss)},
      {"final_loss", number(r.final_loss)},
      {"diverged", r.diverged},
      {"spikes", r.spikes},
      {"steps_per_second", number(r.train_seconds > 0 ? double(r.timed_steps) / r.train_seconds : NAN)},
      {"concurrent_runs", r.concurrent_runs ? nlohmann::json(*r.concurrent_runs) : nlohmann::json(nullptr)},
      {"damaged_rows", r.damaged_rows},
  };
  for (const auto& resume : r.resumes) {
    nlohmann::json changed = nlohmann::json::object();
    for (const auto& c : resume.changed) changed[c.key] = {{"was", c.was}, {"now", c.now}};
    j["resumes"].push_back({{"step", resume.step}, {"changed", changed}});
  }
  for (const auto& [k, v] : r.eval_perplexity) j["perplexity"][k] = number(v);
  for (const auto& [k, v] : r.eval_exact_match) j["exact_match"][k] = number(v);
  for (const auto& [k, v] : r.downstream) j["downstream"][k] = number(v);
  for (const auto& [k, v] : r.downstream_limit) j["downstream_limit"][k] = v;
  return j;
}

}  // namespace

std::string runs_json(const std::vector<RunSummary>& runs) {
  auto all = nlohmann::json::array();
  for (const auto& r : runs) all.push_back(run_json(r));
  return all.dump(2) + "\n";
}

std::string runs_csv(const std::vector<RunSummary>& runs) {
  // Columns: the scalar fields, then one per evaluator / downstream metric seen in any run.
  std::vector<nlohmann::json> rows;
  std::set<std::string> extra;
  for (const auto& r : runs) {
    auto j = run_json(r);
    for (const char* group : {"perplexity", "exact_match", "downstream", "downstream_limit"})
      if (j.contains(group)) {
        for (const auto& [k, v] : j[group].items()) {
          j[std::string(group) + ":" + k] = v;
          extra.insert(std::string(group) + ":" + k);
        }
        j.erase(group);
      }
    rows.push_back(std::move(j));
  }
  std::vector<std::string> columns = {
      "run",        "topology", "model",     "learning_rate",    "seed",
      "state",      "steps",    "max_steps", "tokens",           "initial_loss",
      "final_loss", "diverged", "spikes",    "steps_per_second", "concurrent_runs"};
  columns.insert(columns.end(), extra.begin(), extra.end());
  std::string out;
  for (size_t i = 0; i < columns.size(); ++i) out += (i ? "," : "") + csv_cell(columns[i]);
  out += "\n";
  for (const auto& row : rows) {
    for (size_t i = 0; i < columns.size(); ++i)
      out += (i ? "," : "") + (row.contains(columns[i]) ? csv_cell(row[columns[i]]) : std::string());
    out += "\n";
  }
  return out;
}

}  // namespace siamese::runs
