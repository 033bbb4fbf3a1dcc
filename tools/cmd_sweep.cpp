// `siamese sweep SWEEP.yaml`: topology x learning rate (x seed) runs of one base config
// (src/analysis/sweep.cpp), trained one after another in this process, or printed as
// command lines for a cluster (--print shell|torchrun|sbatch). A finished run resumes at its
// end and returns at once, so re-running a sweep continues where it stopped.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "siamese/analysis/sweep.h"
#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/train/trainer.h"

namespace siamese::cli {

namespace {

struct SweepArgs {
  std::string file;
  std::string print;
  std::string binary = "build/siamese";
  std::vector<std::string> only;
  std::vector<int64_t> seeds;
  int nproc = 1;
};

// Single-quoted for a POSIX shell when it holds anything but safe characters.
std::string shell_quote(const std::string& s) {
  if (s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+") ==
      std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int run_sweep(const SweepArgs& a) {
  const auto sweep = analysis::load_sweep(a.file, a.seeds);
  auto selected = [&](const analysis::SweepRun& r) {
    if (a.only.empty()) return true;
    for (const auto& part : a.only)
      if (r.name.find(part) != std::string::npos) return true;
    return false;
  };
  if (!a.print.empty()) {
    for (const auto& r : sweep.runs) {
      if (!selected(r)) continue;
      std::string train = "train " + shell_quote(r.base);
      for (const auto& o : r.overrides) train += " " + shell_quote(o);
      if (a.print == "shell")
        std::cout << a.binary << " " << train << "\n";
      else if (a.print == "torchrun")
        std::cout << fmt::format("scripts/torchrun --nproc_per_node {} --no_python {} {}\n", a.nproc,
                                 a.binary, train);
      else if (a.print == "sbatch")
        std::cout << fmt::format("sbatch --job-name {} --ntasks-per-node {} --wrap {}\n", r.name,
                                 a.nproc, shell_quote("srun " + a.binary + " " + train));
      else
        throw Error(fmt::format("unknown --print value \"{}\"", a.print), "--print",
                    "use shell, torchrun or sbatch");
    }
    return 0;
  }
  int failed = 0;
  for (const auto& r : sweep.runs) {
    if (!selected(r)) continue;
    spdlog::info("sweep {}: run {} ({} {})", a.file, r.name, r.base, fmt::join(r.overrides, " "));
    const TrainConfig cfg = load_run_config({r.base, r.overrides});
    const int rc = train::train(cfg);
    if (rc == train::kExitNonFinite) {
      spdlog::warn("run {} stopped on a non-finite loss; continuing with the next run", r.name);
      ++failed;
    } else if (rc != 0) {
      return rc;
    }
  }
  spdlog::info("sweep done: {} runs, {} stopped on non-finite values", sweep.runs.size(), failed);
  return 0;
}

}  // namespace

void add_sweep_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand("sweep", "Expand topology x LR (x seed) and train the runs");
  cmd->add_option("sweep", args->file, "sweep YAML (configs/sweeps/)")->required();
  cmd->add_option("--print", args->print, "print command lines instead: shell | torchrun | sbatch");
  cmd->add_option("--binary", args->binary, "siamese binary in printed command lines");
  cmd->add_option("--nproc", args->nproc, "processes per node in printed torchrun/sbatch lines");
  cmd->add_option("--only", args->only, "only runs whose name contains one of these")
      ->delimiter(',');
  cmd->add_option("--seeds", args->seeds, "seeds replacing the file's list, e.g. 1,2")
      ->delimiter(',');
  cmd->callback([&run, args] { run = [args] { return run_sweep(*args); }; });
}

}  // namespace siamese::cli
