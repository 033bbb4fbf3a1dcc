#pragma once
// Each `siamese` subcommand lives in tools/cmd_<name>.cpp and registers itself here.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "siamese/config/config.h"

namespace siamese::cli {

// A subcommand's handler runs after parsing; it returns the process exit code.
using Handler = std::function<int()>;

void add_info_command(CLI::App& app, Handler& run);
void add_parity_command(CLI::App& app, Handler& run);
void add_inspect_command(CLI::App& app, Handler& run);
void add_config_command(CLI::App& app, Handler& run);
void add_commcheck_command(CLI::App& app, Handler& run);
void add_tokenize_command(CLI::App& app, Handler& run);
void add_detokenize_command(CLI::App& app, Handler& run);
void add_train_command(CLI::App& app, Handler& run);
void add_bench_command(CLI::App& app, Handler& run);
void add_export_command(CLI::App& app, Handler& run);
void add_import_command(CLI::App& app, Handler& run);
void add_eval_command(CLI::App& app, Handler& run);
void add_generate_command(CLI::App& app, Handler& run);
void add_analyze_command(CLI::App& app, Handler& run);
void add_sweep_command(CLI::App& app, Handler& run);
void add_report_command(CLI::App& app, Handler& run);

// The `CONFIG [--dotted.key=value ...]` arguments shared by every subcommand that runs a
// config (config, train, bench, inspect). `args` must outlive parsing and the handler (hold
// it in a std::shared_ptr captured by the callback). After parsing, `overrides` holds the
// subcommand's extra arguments in order, ready for load_run_config.
struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;
};
void add_config_args(CLI::App* cmd, ConfigArgs& args);

// load_config (siamese/config/load.h) plus what the config library cannot check on its own:
// model.residual must name a registered topology, whose required settings (registry.h) it
// turns on, refusing a config that sets one of them off. Logs the effective topology and
// where it came from (YAML, MODEL_TYPE or an override).
TrainConfig load_run_config(const ConfigArgs& args);

}  // namespace siamese::cli
