#pragma once
// The model of a checkpoint for the commands that read one (eval, analyze): the resolved
// config.yaml the trainer saved next to the weights, then the trainer's own loader.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "siamese/common/error.h"
#include "siamese/common/shared_dir.h"
#include "siamese/config/load.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"

namespace siamese::cli {

struct CheckpointModel {
  std::filesystem::path dir;  // the step<N> folder
  TrainConfig config;
  model::Transformer model{nullptr};
  int64_t step = 0;
};

// `path` is a step<N> folder, or a run folder (its newest complete checkpoint).
inline CheckpointModel load_checkpoint_model(const std::string& path, torch::Device device) {
  namespace fs = std::filesystem;
  CheckpointModel c;
  c.dir = path;
  if (!fs::exists(c.dir / "train_state.pt")) {
    auto latest = train::latest_checkpoint(c.dir);
    if (!latest)
      throw Error("no checkpoint here", path,
                  "pass a save_folder/step<N> folder or a run folder holding one");
    c.dir = *latest;
  }
  if (!fs::exists(c.dir / "config.yaml"))
    throw Error("checkpoint has no config.yaml", c.dir.string(),
                "checkpoints written by `siamese train` carry their resolved config");
  c.config = load_config((c.dir / "config.yaml").string(), {});
  c.model = model::Transformer(c.config.model);
  c.step = train::load_checkpoint(c.dir, *c.model, nullptr).step;
  c.model->to(device);
  c.model->eval();
  return c;
}

}  // namespace siamese::cli
