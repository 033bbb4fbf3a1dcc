#pragma once
// What a run trains, built one way for `siamese train`, `siamese bench` and the tests: the
// model on its device with the parallel plan applied (train/parallelize.h), the optimizer over
// the plan's shards with its post-step hooks, and the loss scaler.
#include <torch/torch.h>

#include <memory>

#include "siamese/config/config.h"
#include "siamese/dist/parallel_plan.h"
#include "siamese/model/transformer.h"
#include "siamese/train/loss_scale.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/train_step.h"

namespace siamese::train {

struct Trainee {
  model::Transformer model{nullptr};
  std::unique_ptr<Optimizer> optim;
  std::unique_ptr<LossScaler> scaler;
  int64_t micro_batch = 0;  // sequences per forward on this rank

  // The training step over this model, optimizer and scaler; `plan` as given to build.
  TrainStep step(const config::StepSection& cfg, dist::ParallelPlan& plan, torch::Device device);
};

// Seeds torch with cfg.seed, builds the model and applies `plan` to it and to the optimizer
// (parallelize and hook_optimizer); `plan` outlives the result.
Trainee build_trainee(const config::TrainConfig& cfg, torch::Device device, dist::ParallelPlan& plan);

}  // namespace siamese::train
