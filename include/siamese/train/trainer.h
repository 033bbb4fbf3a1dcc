#pragma once
// `siamese train`: the training loop (src/train/trainer.cpp reads top to bottom).
#include <cstdint>
#include <functional>

#include "siamese/config/config.h"
#include "siamese/dist/parallel_plan.h"

namespace siamese::train {

// Exit codes of train().
inline constexpr int kExitNonFinite = 3;
// Stopped by SIGTERM / SIGINT after saving a checkpoint: not finished, resumable. A caller
// (a sweep, a Slurm script) must not count the run as done.
inline constexpr int kExitStopped = 4;

struct RunControl {
  // Stop after this step with a checkpoint, as if preempted (tests, `--stop-at`); -1 = no.
  int64_t stop_at = -1;
  // Data parallelism; nullptr = a world of one.
  dist::ParallelPlan* sync = nullptr;
};

// Trains per `cfg`, resuming from load_path or else from the newest checkpoint in
// save_folder. Writes checkpoints and metrics.jsonl to save_folder. Returns the process
// exit code: 0 when finished (or stopped at --stop-at), kExitStopped when a signal stopped
// it (after its checkpoint), kExitNonFinite on a non-finite loss or gradient. Bad input
// throws siamese::Error.
int train(const config::TrainConfig& cfg, const RunControl& control = {});

}  // namespace siamese::train
