#pragma once
// Each `siamese` subcommand lives in tools/cmd_<name>.cpp and registers itself here.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/config/load.h"
#include "siamese/model/topology_table.h"

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
void add_kernels_command(CLI::App& app, Handler& run);
void add_coord_check_command(CLI::App& app, Handler& run);

// The `CONFIG [--dotted.key=value ...]` arguments shared by every subcommand that runs a
// config (config, train, bench, inspect). `args` must outlive parsing and the handler (hold
// it in a std::shared_ptr captured by the callback). After parsing, `overrides` holds the
// subcommand's extra arguments in order, ready for load_run_config.
struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;
};
void add_config_args(CLI::App* cmd, ConfigArgs& args);

// A CLI11 check of a number against `ok`; `range` says what is accepted, in messages and --help.
inline CLI::Validator number_in(std::function<bool(double)> ok, const std::string& range) {
  return CLI::Validator(
      [ok, range](const std::string& text) {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "\"" + text + "\" is not a number";
        return ok(v) ? std::string() : text + " is outside " + range;
      },
      range);
}

// Writes an output file the user named (--out, --csv, ...) whole, creating its folder, and
// logs where it went.
void write_output(const std::string& path, const std::string& text);

// The run config of CONFIG + overrides under this process's MODEL_TYPE and WORLD_SIZE
// (model::load_run_config).
inline config::TrainConfig load_run_config(const ConfigArgs& args) {
  return model::load_run_config(args.path, args.overrides, config::launch_settings_from_env());
}

}  // namespace siamese::cli
