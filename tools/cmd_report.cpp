// `siamese report RUNS...`: the paper's Table 1 as markdown from each run's metrics.jsonl,
// with each run's state, a table over seeds when runs repeat a topology and learning rate,
// and CSV / JSON for other tools (src/runs/run_summary.cpp; docs/analysis.md).
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/runs/run_summary.h"

namespace siamese::cli {

namespace {

struct ReportArgs {
  std::vector<std::string> runs;
  std::string out, csv, json;
  runs::SummaryOptions options;
};

void write_file(const std::string& path, const std::string& text) {
  if (!path.empty()) write_output(path, text);
}

int run_report(const ReportArgs& a) {
  std::vector<runs::RunSummary> rows;
  for (const auto& r : a.runs) rows.push_back(runs::summarize_run(r, a.options));
  runs::name_models(rows);
  std::string table = runs::markdown_table(rows);
  std::set<std::pair<std::string, std::optional<double>>> groups;
  for (const auto& r : rows) groups.insert({r.model, r.learning_rate});
  if (groups.size() < rows.size())  // some model and learning rate ran with several seeds
    table += "\nOver seeds (mean ± standard deviation):\n\n" + runs::markdown_seed_table(rows);
  std::cout << table;
  write_file(a.out, table);
  write_file(a.csv, runs::runs_csv(rows));
  write_file(a.json, runs::runs_json(rows));
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand("report", "Table-1-style markdown table of runs");
  cmd->add_option("runs", args->runs, "run folders (save_folder of each run)")->required();
  cmd->add_option("--out", args->out, "write the Markdown tables to this file too");
  cmd->add_option("--csv", args->csv, "write one CSV row per run to this file");
  cmd->add_option("--json", args->json,
                  "write every run's fields as JSON to this file (scripts/plot_report.py draws it)");
  cmd->add_option_function<double>(
         "--diverge-loss", [args](const double& loss) { args->options.diverge_loss = loss; },
         "final training loss above which a run counts as diverged (default: the run's initial loss, its "
         "first logged step's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--final-window", args->options.final_window,
                  "logged steps averaged for the final training loss")
      ->check(CLI::PositiveNumber);
  cmd->callback([&run, args] { run = [args] { return run_report(*args); }; });
}

}  // namespace siamese::cli
