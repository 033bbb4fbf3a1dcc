#include "siamese/train/checkpoint_model.h"

#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/model/kernel_choice.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/save_folder.h"

namespace siamese::train {

namespace fs = std::filesystem;

CheckpointModel load_checkpoint_model(const std::string& path, torch::Device device) {
  CheckpointModel c;
  c.dir = path;
  ManifestCheck check = ManifestCheck::Verify;
  if (!fs::exists(c.dir / "train_state.pt")) {
    auto latest = latest_checkpoint(c.dir);
    if (!latest)
      throw Error("no checkpoint here", path,
                  "pass a save_folder/step<N> folder or a run folder holding one");
    c.dir = *latest;
    check = ManifestCheck::VerifiedAlready;  // latest_checkpoint hashed it
  }
  if (!fs::exists(c.dir / "config.yaml"))
    throw Error("checkpoint has no config.yaml", c.dir.string(),
                "checkpoints written by `siamese train` carry their resolved config");
  c.config = config::load_config((c.dir / "config.yaml").string(), {});
  model::use_kernels(c.config.model.kernels);
  c.model = model::Transformer(c.config.model);
  c.step = load_checkpoint(c.dir, *c.model, nullptr, nullptr, nullptr, {}, check).step;
  c.model->to(device);
  c.model->eval();
  return c;
}

}  // namespace siamese::train
