#pragma once
// Each `siamese` subcommand lives in tools/cmd_<name>.cpp and registers itself here.
#include <CLI/CLI.hpp>

namespace siamese::cli {

// A subcommand's handler runs after parsing; it returns the process exit code.
using Handler = std::function<int()>;

void add_info_command(CLI::App& app, Handler& run);
void add_tokenize_command(CLI::App& app, Handler& run);
void add_detokenize_command(CLI::App& app, Handler& run);
void add_parity_command(CLI::App& app, Handler& run);

}  // namespace siamese::cli
