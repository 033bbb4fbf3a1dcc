#pragma once
// What a run or a sweep will cost, said before it starts: a lower bound from the model's
// FLOPs at the machine's measured matmul rate (train, import), and a sweep's total from one
// short measured step of each distinct model (bench's timed step), times its runs' steps.
#include <string>
#include <vector>

#include <torch/torch.h>

#include "siamese/config/config.h"
#include "siamese/train/lr_schedule.h"

namespace siamese::train {

// A step's training FLOPs (model::flops_per_token of the global batch) and the time they
// take at least, at the matmul rate measured now on `device` (about 0.1 s to measure).
struct FlopsBound {
  double tokens_per_step = 0, flops_per_step = 0;
  double matmul_flops = 0;  // FLOP/s
  double seconds_per_step = 0;
};
FlopsBound flops_bound(const config::TrainConfig& cfg, torch::Device device);

// "at least 3m20s for 500 steps (...)": what train logs before its first step.
std::string flops_bound_note(const FlopsBound& bound, int64_t steps, torch::Device device);

// Runs that differ only in what does not change a step's cost (learning rate, seeds, names,
// schedule, length) share one model; each model's step is measured once, in this process
// with all its threads, 2 untimed and 3 timed steps of its global batch (the median).
struct SweepCost {
  struct Model {
    std::string first_run;  // the name of its first run, to say which model it is
    double seconds_per_step = 0;
    int runs = 0;
    int64_t steps = 0;  // of all its runs
  };
  std::vector<Model> models;
  double seconds() const;
};
SweepCost sweep_cost(const std::vector<config::TrainConfig>& configs, const std::vector<std::string>& names);

// The settings of `cfg` that change a step's cost, as text: equal for runs of one model.
std::string step_cost_key(const config::TrainConfig& cfg);

// The length `cfg` trains (lr_schedule.h): max_duration resolved against its data when given
// in epochs.
RunLength planned_length(const config::TrainConfig& cfg);

}  // namespace siamese::train
