#pragma once
// The model of a checkpoint for the commands that read one (eval, generate, analyze,
// export): the resolved config.yaml the trainer saved next to the weights, then the
// trainer's own loader.
#include <filesystem>
#include <string>

#include "siamese/config/config.h"
#include "siamese/model/transformer.h"

namespace siamese::train {

struct CheckpointModel {
  std::filesystem::path dir;  // the step<N> folder
  config::TrainConfig config;
  model::Transformer model{nullptr};
  int64_t step = 0;
};

// `path` is a step<N> folder, or a run folder (its newest complete checkpoint). The model is
// moved to `device` in eval mode.
CheckpointModel load_checkpoint_model(const std::string& path, torch::Device device);

}  // namespace siamese::train
