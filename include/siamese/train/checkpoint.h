#pragma once
// Checkpoints: save_folder/step<N>/ holding model.pt, optim.pt, train_state.pt (step,
// tokens, skipped bad steps, RNG states), train_state.json (the same, for people),
// config.yaml (the resolved config) and, written last, manifest.json (the step, the config
// and each file's size and sha256). A checkpoint is written into a temporary folder,
// fsynced, then renamed into place; loading verifies the manifest, so a folder whose save or
// pruning was cut short, or whose bytes changed on disk, is never loaded. The folder that
// holds checkpoints (lock, clean-up, pruning, the newest one) is save_folder.h.
#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/train/optimizer.h"

namespace siamese::train {

// Written last into a checkpoint folder: its presence says the save finished.
inline constexpr const char* kCheckpointManifest = "manifest.json";

struct TrainState {
  int64_t step = 0;    // optimizer steps completed; also the position in the data order
  int64_t tokens = 0;  // training tokens consumed (global)
  int64_t bad_steps = 0;
  // amp_fp16's dynamic loss scale (loss_scale.h); 0 for the other precisions.
  double loss_scale = 0;
  int64_t loss_scale_good_steps = 0;
};

// Writes step<state.step> under save_folder. Any write error (a full disk) throws
// siamese::Error naming the file and the free space, after removing the temporary folder;
// existing checkpoints are untouched. Called on rank 0 only: every rank holds the same weights.
std::filesystem::path save_checkpoint(const std::filesystem::path& save_folder, torch::nn::Module& model,
                                      AdamW& optim, const TrainState& state, const std::string& config_yaml);

// Why `folder` is not a complete, intact checkpoint (missing manifest, a file missing, of
// another size or another sha256), or nullopt when it is one.
std::optional<std::string> checkpoint_problem(const std::filesystem::path& folder);

// Verifies the manifest, then restores model, optimizer and RNG states; returns the train
// state. Throws siamese::Error naming the folder when it is not an intact checkpoint or does
// not match the model. With `same_model` (resuming a run), it also refuses a checkpoint
// whose saved model config differs in anything that changes what the weights compute
// (shapes, heads, topology, norms), naming the keys; dropout, initialisation and
// memory/kernel switches may differ.
TrainState load_checkpoint(const std::filesystem::path& folder, torch::nn::Module& model, AdamW* optim,
                           const ModelConfig* same_model = nullptr);

struct SettingChange {
  std::string key, was, now;  // dotted key, values as YAML text
};
// The settings of `now` that differ from the config the checkpoint in `folder` was trained
// with (learning rate, batch size, schedule, duration, ...), so that a resumed run can say
// what it changed; where the run lives (save_folder, load_path) is left out.
std::vector<SettingChange> changed_settings(const std::filesystem::path& folder, const TrainConfig& now);

}  // namespace siamese::train
