#pragma once
// `siamese train`: the training loop (src/train/trainer.cpp reads top to bottom).
#include <cstdint>
#include <functional>

#include "siamese/common/exit_codes.h"
#include "siamese/config/config.h"
#include "siamese/dist/parallel_plan.h"

namespace siamese::train {

struct RunControl {
  // Stop after this step with a checkpoint, as if preempted (tests, `--stop-at`); -1 = no.
  int64_t stop_at = -1;
  // How the run spreads over its ranks (train/parallelize.h); nullptr = a world of one.
  dist::ParallelPlan* plan = nullptr;
};

// Trains per `cfg`, resuming from load_path or else from the newest checkpoint in
// save_folder. Writes checkpoints and metrics.jsonl to save_folder. Returns the process
// exit code (common/exit_codes.h): 0 when finished (or stopped at --stop-at), kExitStopped when a signal
// stopped it (after its checkpoint), kExitNonFinite on a non-finite loss or gradient. Bad input throws
// siamese::Error.
int train(const config::TrainConfig& cfg, const RunControl& control = {});

}  // namespace siamese::train
