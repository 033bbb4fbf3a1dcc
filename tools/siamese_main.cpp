// `siamese`: one binary for every workflow (train, eval, tokenize, parity, bench, ...).
#include <spdlog/spdlog.h>

#include <iostream>
#include <set>
#include <string>

#include "commands.h"
#include "siamese/common/build_info.h"
#include "siamese/common/error.h"
#include "siamese/common/exit_codes.h"
#include "siamese/common/logging.h"
#include "siamese/common/user_path.h"
#include "siamese/dist/world.h"
#include "siamese/train/provenance.h"
#include "siamese/train/runtime.h"

namespace {

int run_command(int argc, char** argv) {
  // The subcommands whose work is OpenMP-parallel tensor code choose its wait policy; the
  // others skip the restart that choice costs (about a LibTorch load).
  static const std::set<std::string> kRunsModels = {"train",   "bench", "eval",  "generate",
                                                    "analyze", "sweep", "parity"};
  if (argc > 1 && kRunsModels.count(argv[1])) siamese::train::restart_with_short_openmp_spin(argv);
  // Under torchrun or srun only rank 0 logs progress; a malformed launcher environment is
  // reported by the command that needs the world, so here it just means rank 0.
  int rank = 0;
  try {
    rank = siamese::dist::detect_world().rank;
  } catch (const siamese::Error&) {
  }
  siamese::init_logging(rank);
  siamese::train::record_command_line(argc, argv);
  CLI::App app{"siamese: pretraining and analysis of residual-normalization topologies"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version",
      [] {
        auto text = siamese::build_info_text(siamese::build_info());
        text.pop_back();  // CLI11 ends the line itself
        return text;
      },
      "Print the git commit and the LibTorch, CUDA, cuDNN and NCCL versions");
  siamese::cli::Handler run;
  siamese::cli::add_info_command(app, run);
  siamese::cli::add_parity_command(app, run);
  siamese::cli::add_inspect_command(app, run);
  siamese::cli::add_config_command(app, run);
  siamese::cli::add_commcheck_command(app, run);
  siamese::cli::add_tokenize_command(app, run);
  siamese::cli::add_detokenize_command(app, run);
  siamese::cli::add_train_command(app, run);
  siamese::cli::add_bench_command(app, run);
  siamese::cli::add_export_command(app, run);
  siamese::cli::add_import_command(app, run);
  siamese::cli::add_eval_command(app, run);
  siamese::cli::add_generate_command(app, run);
  siamese::cli::add_analyze_command(app, run);
  siamese::cli::add_sweep_command(app, run);
  siamese::cli::add_report_command(app, run);
  siamese::cli::add_kernels_command(app, run);
  siamese::cli::add_coord_check_command(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are successes; every other parse error is bad input, whatever
    // CLI11's own number for its kind (105-109), so that a restart policy never retries it.
    return app.exit(e) == 0 ? siamese::kExitOk : siamese::kExitBadInput;
  }
  try {
    return run ? run() : siamese::kExitCrash;
  } catch (const siamese::Error& e) {
    if (rank == 0 || siamese::dist::joined_ranks()) std::cerr << "error: " << e.what() << "\n";
    return siamese::kExitBadInput;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path no command checked by itself: still named, with a fix, never the raw text.
    std::cerr << "error: " << siamese::path_error(e).what() << "\n";
    return siamese::kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return siamese::kExitCrash;
  }
}

}  // namespace

int main(int argc, char** argv) {
  siamese::dist::die_with_launcher();
  const int code = run_command(argc, argv);
  siamese::dist::report_exit(code);
  return code;
}
