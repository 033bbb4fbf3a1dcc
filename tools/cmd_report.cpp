// `siamese report RUNS...`: the paper's Table 1 as markdown from each run's metrics.jsonl,
// with each run's state, a table over seeds when runs repeat a model and learning rate, and
// CSV / JSON beside the Markdown for other tools (src/runs/run_summary.cpp; docs/analysis.md).
// A folder of runs, such as a sweep's, stands for its runs, in the sweep's order. --baseline adds
// each model's difference from one of them paired over seeds, and where the baseline ran at
// several budgets each model's effective speedup over it (src/runs/effective_speedup.cpp).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/runs/effective_speedup.h"
#include "siamese/runs/run_summary.h"
#include "siamese/runs/sweep.h"

namespace siamese::cli {

namespace {

namespace fs = std::filesystem;

struct ReportArgs {
  std::vector<std::string> runs;
  std::string out, csv, json;
  runs::SummaryOptions options;
  runs::SpeedupOptions speedup;
};

void write_file(const std::string& path, const std::string& text) {
  if (!path.empty()) write_output(path, text);
}

// PATH.md -> PATH<suffix>: the CSV and JSON go beside the Markdown.
std::string beside(const std::string& markdown, const std::string& suffix) {
  fs::path p(markdown);
  return (p.parent_path() / p.stem()).string() + suffix;
}

int run_report(ReportArgs a) {
  std::vector<std::string> folders;
  std::optional<std::string> runs_folder;  // the one argument, when it is a folder of runs
  for (const auto& arg : a.runs) {
    // A shell glob over a sweep's folder also names its sweep.json and reports: not runs.
    if (fs::is_regular_file(arg)) {
      spdlog::info("report: skipped {}, a file and not a run folder", arg);
      continue;
    }
    const auto expanded = runs::report_folders(arg);
    if (a.runs.size() == 1 && (expanded.size() != 1 || expanded[0] != arg)) runs_folder = arg;
    folders.insert(folders.end(), expanded.begin(), expanded.end());
  }
  if (folders.empty())
    throw Error("no run folders to report", fmt::format("{}", fmt::join(a.runs, " ")),
                "pass run folders (save_folder of `siamese train`) or a sweep's --out folder");
  std::vector<runs::RunSummary> rows;
  for (const auto& r : folders) rows.push_back(runs::summarize_run(r, a.options));
  runs::name_models(rows);
  std::string table;
  std::set<std::pair<std::string, std::optional<double>>> groups;
  for (const auto& r : rows) groups.insert({r.model, r.learning_rate});
  if (groups.size() < rows.size())  // some model and learning rate ran with several seeds
    table +=
        "Over seeds (mean [95% t-interval, n - 1 degrees of freedom] over the runs that did not diverge; the "
        "standard deviations are in the _seeds.csv):\n\n" +
        runs::markdown_seed_table(rows) + "\nEvery run:\n\n";
  table += runs::markdown_table(rows);
  std::optional<runs::SpeedupTable> speedup;
  if (!a.speedup.baseline.empty()) {
    const std::string paired = runs::markdown_paired_table(rows, a.speedup.baseline);
    if (!paired.empty()) table += "\n" + paired;
    // A seed sweep at one budget gets the paired table alone; a ladder its speedups too.
    if (paired.empty() || runs::baseline_budgets(rows, a.speedup.baseline) > 1) {
      speedup = runs::effective_speedup(rows, a.speedup);
      table += "\n" + runs::markdown_speedup(*speedup);
    }
  }
  std::cout << table;
  if (a.out.empty() && runs_folder) a.out = (fs::path(*runs_folder) / "report.md").string();
  if (!a.out.empty()) {
    if (a.csv.empty()) a.csv = beside(a.out, ".csv");
    if (a.json.empty()) a.json = beside(a.out, ".json");
    if (groups.size() < rows.size()) write_file(beside(a.out, "_seeds.csv"), runs::seed_csv(rows));
  }
  write_file(a.out, table);
  write_file(a.csv, runs::runs_csv(rows));
  write_file(a.json, runs::runs_json(rows));
  if (speedup && !a.json.empty()) write_file(beside(a.json, "_speedup.json"), runs::speedup_json(*speedup));
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand("report", "Table-1-style markdown table of runs, with CSV and JSON");
  cmd->add_option("runs", args->runs,
                  "run folders (save_folder of each run), or one sweep's --out folder (its runs in sweep "
                  "order; writes FOLDER/report.md, .csv, .json unless --out says otherwise)")
      ->required();
  cmd->add_option(
      "--out", args->out,
      "write the Markdown tables to this file, and beside it the same name with .csv (one row per "
      "run), .json (scripts/plot_report.py draws it) and _seeds.csv (one row per seed group)");
  cmd->add_option("--csv", args->csv, "write one CSV row per run to this file instead");
  cmd->add_option("--json", args->json, "write every run's fields as JSON to this file instead");
  cmd->add_option_function<double>(
         "--diverge-loss", [args](const double& loss) { args->options.diverge_loss = loss; },
         "final training loss above which a run counts as diverged (default: the run's initial "
         "loss, its first logged step's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--final-window", args->options.final_window,
                  "logged steps averaged for the final training loss")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--baseline", args->speedup.baseline,
                  "compare every model with this one (a model as the Model column names it, e.g. pre): "
                  "the final-loss difference paired over seeds with its 95% t-interval, and where it ran at "
                  "several compute budgets the effective speedup from a power law fitted to them "
                  "(docs/analysis.md); the JSON gets FILE_speedup.json beside it");
  cmd->add_option("--speedup-loss", args->speedup.loss,
                  "the loss the speedup compares: train (the final training loss) or an lm evaluator's "
                  "label (its last perplexity, as log perplexity)");
  cmd->callback([&run, args] { run = [args] { return run_report(*args); }; });
}

}  // namespace siamese::cli
