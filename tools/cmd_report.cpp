// `siamese report RUNS...`: the paper's Table 1 as markdown from each run's metrics.jsonl
// (src/analysis/run_summary.cpp defines the stability markers; docs/analysis.md).
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "siamese/analysis/run_summary.h"

namespace siamese::cli {

namespace {

struct ReportArgs {
  std::vector<std::string> runs;
  std::string out;
  analysis::SummaryOptions options;
};

int run_report(const ReportArgs& a) {
  std::vector<analysis::RunSummary> rows;
  for (const auto& r : a.runs) rows.push_back(analysis::summarize_run(r, a.options));
  const std::string table = analysis::markdown_table(rows);
  std::cout << table;
  if (!a.out.empty()) {
    std::ofstream(a.out) << table;
    spdlog::info("wrote {}", a.out);
  }
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand("report", "Table-1-style markdown table of runs");
  cmd->add_option("runs", args->runs, "run folders (save_folder of each run)")->required();
  cmd->add_option("--out", args->out, "write the table to this file too");
  cmd->add_option("--diverge-loss", args->options.diverge_loss,
                  "final training loss above which a run counts as diverged");
  cmd->add_option("--final-window", args->options.final_window,
                  "logged steps averaged for the final training loss");
  cmd->callback([&run, args] { run = [args] { return run_report(*args); }; });
}

}  // namespace siamese::cli
