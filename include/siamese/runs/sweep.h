#pragma once
// A sweep file expands topology x learning rate x seed into runs of one base config:
//
//   base: ../tiny/base.yaml            # relative to the sweep file
//   base_for: {hybrid: ../tiny/hybrid.yaml, hybrid_pre: ../tiny/hybrid.yaml}   # optional
//   save_root: runs/sweep              # run folders: <save_root>/<topology>-lr<lr>-s<seed>
//   topologies: [pre, post, hybrid, post_pre, hybrid_pre]   # or variants (config/variant.h):
//                                      # "pre:model.layer_norm_type=dyt" runs as pre+dyt-lr...
//   learning_rates: [5.0e-4, 1.0e-3, 2.0e-3]
//   seeds: [6198]                      # optional, default: the base config's seed
//   overrides: [--model.n_layers=12]   # optional, applied to every run before the sweep keys
//
// Every run is the base config plus overrides plus --model.residual, --optimizer.learning_rate,
// --seed, --run_name and --save_folder, i.e. exactly what `siamese train BASE ...` would get.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace siamese::runs {

struct SweepRun {
  std::string name;  // <variant name>-lr<lr>[-s<seed>]
  std::string base;  // config file
  std::vector<std::string> overrides;
  std::string save_folder;  // <save_root>/<name>, also among the overrides
};

struct Sweep {
  std::string path;
  std::vector<SweepRun> runs;
};

// Throws siamese::Error naming the sweep file and key for a missing or ill-typed key.
// `seeds`, when given, replaces the file's list (`siamese sweep --seeds`: more seeds of
// the same sweep without editing it).
Sweep load_sweep(const std::string& path, const std::vector<int64_t>& seeds = {});

}  // namespace siamese::runs
