#pragma once
// Checkpoints: save_folder/step<N>/ holding model.pt, optim.pt, train_state.pt (step,
// tokens, skipped bad steps, RNG states), train_state.json (the same, for people) and
// config.yaml (the resolved config). A checkpoint is written into a temporary folder,
// fsynced, then renamed into place, so a folder named step<N> is always complete; a crash
// mid-write leaves only a temporary folder that loading ignores.
#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <string>

#include "siamese/train/optimizer.h"

namespace siamese::train {

struct TrainState {
  int64_t step = 0;    // optimizer steps completed; also the position in the data order
  int64_t tokens = 0;  // training tokens consumed (global)
  int64_t bad_steps = 0;
};

// Writes step<state.step> under save_folder; then, when keep > 0, removes all but the
// newest `keep` checkpoints. Called on rank 0 only: every rank holds the same weights.
std::filesystem::path save_checkpoint(const std::filesystem::path& save_folder,
                                      torch::nn::Module& model, AdamW& optim,
                                      const TrainState& state, const std::string& config_yaml,
                                      int64_t keep);

// Writes save_folder/config.yaml (temporary file + rename) when a run starts, so a run
// that stops before its first checkpoint (a diverged one) still says what it trained;
// `siamese report` falls back to it. A resumed run rewrites it with its own config.
void write_run_config(const std::filesystem::path& save_folder, const std::string& config_yaml);

// The newest complete step<N> folder under save_folder, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& save_folder);

// Restores model, optimizer and RNG states; returns the train state. Throws siamese::Error
// naming the folder when it is not a checkpoint or does not match the model.
TrainState load_checkpoint(const std::filesystem::path& folder, torch::nn::Module& model,
                           AdamW* optim);

}  // namespace siamese::train
