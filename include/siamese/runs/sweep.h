#pragma once
// A sweep expands topology x learning rate x seed into runs of one base config. It is given
// as a file, on the command line (`siamese sweep --config C --topologies a,b --lr x,y`), or
// both, the command line's lists replacing the file's. A sweep file:
//
//   base: ../tiny/base.yaml            # relative to the sweep file
//   base_for: {hybrid: ../tiny/hybrid.yaml, hybrid_pre: ../tiny/hybrid.yaml}   # optional
//   save_root: runs/sweep              # run folders: <save_root>/<topology>-lr<lr>-s<seed>
//                                      # (lr as its shortest exact text: 0.0012345678)
//   topologies: [pre, post, hybrid, post_pre, hybrid_pre]   # or variants (config/variant.h):
//                                      # "pre:model.layer_norm_type=dyt" runs as pre+dyt-lr...
//   learning_rates: [5.0e-4, 1.0e-3, 2.0e-3]
//   seeds: [6198]                      # optional, default: the base config's seed
//   overrides: [--model.n_layers=12]   # optional, applied to every run before the sweep keys
//   decay_branches: ["250:50", "500:100"]   # optional: from each run's checkpoint at step N a
//                                      # decay of K steps (`siamese train --decay_from`), run
//                                      # <run>_decayN+K after its stable run (a wsd schedule)
//
// Any other key is refused: a typo (`seed:`) would otherwise run a different sweep silently.
// Every run is the base config plus overrides plus --model.residual, --optimizer.learning_rate,
// --seed, --run_name and --save_folder, i.e. exactly what `siamese train BASE ...` would get.
//
// No two runs of a sweep share a folder: a value listed twice is refused, and two variants
// whose names collide ("pre:max_duration=3" and "pre:scheduler.t_warmup=3" are both pre+3)
// are named by every setting they set (pre+max_duration=3, pre+scheduler.t_warmup=3). An
// override of a key the sweep sets itself (model.residual, optimizer.learning_rate, seed when
// seeds are listed, run_name, save_folder) is refused: the sweep's value would win unseen.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/config/variant.h"
#include "siamese/runs/run_summary.h"

namespace siamese::runs {

// What a sweep varies, parsed and checked once.
struct SweepSpec {
  std::string base;  // config file
  std::map<std::string, std::string> base_for;
  std::string save_root = "runs/sweep";
  std::vector<config::Variant> topologies;
  std::vector<double> learning_rates;
  std::vector<int64_t> seeds;          // empty: the base config's seed
  std::vector<std::string> overrides;  // "--dotted.key=value"
  // Decay branches of each run: from its checkpoint at step `at`, `steps` steps of decay.
  struct Branch {
    int64_t at = 0, steps = 0;
  };
  std::vector<Branch> decay_branches;
  // Where each list and override was given (a file's line, or an option such as --seeds),
  // for the errors of expand_sweep: keyed by the list's key ("topologies", "learning_rates",
  // "seeds") or by the override's text. Missing: the sweep's path.
  std::map<std::string, std::string> where;
};

struct SweepRun {
  std::string name;  // <variant name>-lr<lr>[-s<seed>]: letters, digits and . _ + = , - only
  std::string base;  // config file
  std::vector<std::string> overrides;
  std::string save_folder;  // <save_root>/<name>, also among the overrides
  // A decay branch: the stable run it starts from (a run of the same sweep, listed before it),
  // and the step of that run's checkpoint. Empty for a stable run.
  std::string parent;
  int64_t branch_at = 0;
};

struct Sweep {
  std::string path;  // the sweep file, or "the command line"
  std::string save_root;
  std::vector<SweepRun> runs;
};

// Throws siamese::Error naming the sweep file, line and key for a missing, ill-typed or
// unknown key.
SweepSpec read_sweep_file(const std::string& path);

// The runs in sweep order: topology, then learning rate, then seed. Throws siamese::Error,
// naming where the list or override was given, for a repeated value, an override of a key the
// sweep sets, or a run name that cannot be a folder or Slurm job name.
Sweep expand_sweep(const SweepSpec& spec, const std::string& path);

// "N:K" (decay_branches, --decay-branches) as a branch; anything else throws naming `where`.
SweepSpec::Branch parse_branch(const std::string& text, const std::string& where);

// read_sweep_file, then expand_sweep.
Sweep load_sweep(const std::string& path);

// "key=value" or "--key=value" (`siamese sweep --set`) as a config override; anything else
// throws naming `where`.
std::string override_from_setting(const std::string& setting, const std::string& where);

// <save_root>/sweep.json records a sweep's runs in its order and, for each run it trained, how
// many runs trained at once (`--jobs`): steps/s of a run that shared the cores says nothing
// about its topology. Sweeps into the same folder add their runs after the ones recorded.
inline constexpr const char* kSweepRecord = "sweep.json";
struct SweepRecord {
  std::vector<std::string> runs;    // run folder names, in sweep order
  std::map<std::string, int> jobs;  // run -> most runs trained at once while it trained
};
std::optional<SweepRecord> read_sweep_record(const std::string& save_root);
void record_sweep(const std::string& save_root, const std::vector<std::string>& runs,
                  const std::vector<std::string>& trained, int jobs);

// The run folders `siamese report` reads for one argument: a run folder gives itself; a folder
// of runs, such as a sweep's save_root, gives them in the sweep's order when its sweep.json
// records one, then any other run in it by name.
std::vector<std::string> report_folders(const std::string& argument);

// "run 3 of 18" progress: the time left after `finished` of `total` runs took `elapsed_seconds`
// (with --jobs N the runs overlap, so this is wall time per finished run, not a run's length).
// Before the first run ends it is the sweep's estimate from measured steps, when there is one.
std::string time_left_text(int finished, int total, double elapsed_seconds, double estimated_seconds = 0);

}  // namespace siamese::runs
