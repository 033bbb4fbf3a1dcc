#include "siamese/analysis/run_summary.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "siamese/common/error.h"
#include "siamese/common/step_folder.h"
#include "siamese/tokenizer/text_input.h"

namespace siamese::analysis {

namespace fs = std::filesystem;

namespace {

// The newest step<N>/config.yaml of a run, else the run folder's config.yaml (written at
// the start of training, so a run that diverged before any checkpoint has one too).
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
  if (!best && fs::exists(run / "config.yaml")) best = run / "config.yaml";
  return best;
}

}  // namespace

RunSummary summarize_run(const std::string& run_dir, const SummaryOptions& options) {
  RunSummary s;
  s.run = run_dir;
  const fs::path metrics = fs::path(run_dir) / "metrics.jsonl";
  if (!fs::exists(metrics))
    throw Error("no metrics.jsonl", metrics.string(), "pass run folders written by `siamese train`");
  std::deque<double> recent;
  tokenizer::for_each_jsonl(metrics.string(), [&](int64_t, const nlohmann::json& j) {
    const std::string event = j.value("event", "");
    if (event == "nonfinite") {
      s.nonfinite = true;
    } else if (event == "eval") {
      if (j.contains("label") && j.contains("perplexity") && j["perplexity"].is_number())
        s.eval_perplexity[j["label"].get<std::string>()] = j["perplexity"].get<double>();
    } else if (event.empty() && j.contains("loss") && j.contains("lr")) {
      s.steps = j.value("step", int64_t(0));
      s.tokens = j.value("tokens", int64_t(0));
      if (!j["loss"].is_number()) {
        s.nonfinite = true;
      } else {
        recent.push_back(j["loss"].get<double>());
        if (int64_t(recent.size()) > options.final_window) recent.pop_front();
      }
      if (j.value("loss_spike", false)) ++s.spikes;
    }
    for (const auto& [key, value] : j.items())
      if (key.rfind("eval/downstream/", 0) == 0 && value.is_number() &&
          key.find("_documents") == std::string::npos)
        s.downstream[key] = value.get<double>();
  }, /*skip_cut_last_line=*/true);
  if (!recent.empty()) {
    double sum = 0;
    for (double v : recent) sum += v;
    s.final_loss = sum / double(recent.size());
  }
  s.diverged = s.nonfinite || (std::isfinite(s.final_loss) && s.final_loss > options.diverge_loss);
  if (auto cfg = latest_config(run_dir)) {
    const YAML::Node y = YAML::LoadFile(cfg->string());
    if (y["model"] && y["model"]["residual"]) s.topology = y["model"]["residual"].as<std::string>();
    if (y["optimizer"] && y["optimizer"]["learning_rate"])
      s.learning_rate = y["optimizer"]["learning_rate"].as<double>();
    if (y["seed"]) s.seed = y["seed"].as<int64_t>();
  }
  if (s.topology.empty()) s.topology = fs::path(run_dir).filename().string();
  return s;
}

std::string markdown_table(const std::vector<RunSummary>& runs) {
  std::set<std::string> evals, downstream;
  for (const auto& r : runs) {
    for (const auto& [k, v] : r.eval_perplexity) evals.insert(k);
    for (const auto& [k, v] : r.downstream) downstream.insert(k);
  }
  auto short_key = [](const std::string& k) { return k.substr(std::string("eval/downstream/").size()); };
  std::string out = "| Model | LR | seed | steps | tokens | train loss | train PPL |";
  std::string rule = "|---|---:|---:|---:|---:|---:|---:|";
  for (const auto& e : evals) {
    out += " " + e + " PPL |";
    rule += "---:|";
  }
  for (const auto& d : downstream) {
    out += " " + short_key(d) + " |";
    rule += "---:|";
  }
  if (!downstream.empty()) {
    out += " Avg |";
    rule += "---:|";
  }
  out += " stability |\n" + rule + "---|\n";
  auto num = [](double v, const char* f) {
    return std::isfinite(v) ? fmt::format(fmt::runtime(f), v) : std::string("-");
  };
  for (const auto& r : runs) {
    const std::string mark = std::string(r.diverged ? "diverged" : "ok") + (r.spikes ? "*" : "");
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} |", r.topology,
                       r.learning_rate ? fmt::format("{:g}", *r.learning_rate) : "-",
                       r.seed ? std::to_string(*r.seed) : "-", r.steps, r.tokens,
                       r.diverged ? "diverged" : num(r.final_loss, "{:.3f}"),
                       r.diverged ? "diverged" : num(std::exp(r.final_loss), "{:.2f}"));
    for (const auto& e : evals) {
      auto it = r.eval_perplexity.find(e);
      out += " " + (r.diverged || it == r.eval_perplexity.end() ? std::string("-")
                                                               : num(it->second, "{:.2f}")) + " |";
    }
    double sum = 0;
    int n = 0;
    for (const auto& d : downstream) {
      auto it = r.downstream.find(d);
      if (it != r.downstream.end()) {
        sum += it->second;
        ++n;
      }
      out += " " + (it == r.downstream.end() ? std::string("-") : num(100 * it->second, "{:.1f}")) + " |";
    }
    if (!downstream.empty())
      out += " " + (n == int(downstream.size()) ? num(100 * sum / n, "{:.1f}") : std::string("-")) + " |";
    out += fmt::format(" {}{} |\n", mark, r.spikes ? fmt::format(" ({} spikes)", r.spikes) : "");
  }
  return out;
}

}  // namespace siamese::analysis
