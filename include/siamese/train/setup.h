#pragma once
// What a run trains, built one way for `siamese train`, `siamese bench` and the tests: the
// model on its device under a strategy (its parameters broadcast, its optimizer on the
// strategy's shards, its block hooks installed), the optimizer with its post-step hooks, and
// the loss scaler.
#include <torch/torch.h>

#include <memory>

#include "siamese/config/config.h"
#include "siamese/dist/gradient_sync.h"
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

  // The training step over this model, optimizer and scaler; `sync` as given to build.
  TrainStep step(const TrainConfig& cfg, GradientSync& sync, torch::Device device);
};

// Seeds torch with cfg.seed and builds the model, then hands it to `sync` (which outlives
// the result). The optimizer's post-step hooks, in order: the strategy makes the parameters
// whole, the topology projects its weights, and the strategy's shards take those values.
Trainee build_trainee(const TrainConfig& cfg, torch::Device device, GradientSync& sync);

}  // namespace siamese::train
