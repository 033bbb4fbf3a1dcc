#pragma once
// Checkpoints: save_folder/step<N>/ holding model.pt, optim.pt, train_state.pt (step,
// tokens, skipped bad steps, RNG states), train_state.json (the same, for people),
// config.yaml (the resolved config) and, written last, manifest.json (the step, the config
// and each file's size and sha256). A checkpoint is written into a temporary folder,
// fsynced, then renamed into place; loading verifies the manifest, so a folder whose save or
// pruning was cut short, or whose bytes changed on disk, is never loaded.
#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>

#include "siamese/config/config.h"
#include "siamese/train/optimizer.h"

namespace siamese::train {

struct TrainState {
  int64_t step = 0;    // optimizer steps completed; also the position in the data order
  int64_t tokens = 0;  // training tokens consumed (global)
  int64_t bad_steps = 0;
  // amp_fp16's dynamic loss scale (loss_scale.h); 0 for the other precisions.
  double loss_scale = 0;
  int64_t loss_scale_good_steps = 0;
};

// The one writer of a save_folder: an exclusive flock on save_folder/.lock, released when
// this object is destroyed or the process exits (however it exits). Taken by rank 0 only,
// the rank that writes. Throws siamese::Error when another process holds it.
class SaveFolderLock {
 public:
  explicit SaveFolderLock(const std::filesystem::path& save_folder);
  ~SaveFolderLock();
  SaveFolderLock(const SaveFolderLock&) = delete;
  SaveFolderLock& operator=(const SaveFolderLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes what interrupted saves and prunings left (temporary and half-deleted folders)
// and puts back a checkpoint whose replacement was cut short. Safe only for the lock holder.
void clean_save_folder(const std::filesystem::path& save_folder, const SaveFolderLock& held);

// Writes step<state.step> under save_folder. Any write error (a full disk) throws
// siamese::Error naming the file and the free space, after removing the temporary folder;
// existing checkpoints are untouched. Called on rank 0 only: every rank holds the same weights.
std::filesystem::path save_checkpoint(const std::filesystem::path& save_folder, torch::nn::Module& model,
                                      AdamW& optim, const TrainState& state, const std::string& config_yaml);

// Keeps the newest `keep` checkpoints (keep <= 0 keeps all) among those a run may prune:
// the ones not newer than `resumed_step` and the ones it wrote itself (`written`). A run
// rolled back to an older checkpoint therefore never deletes the newer ones.
void prune_checkpoints(const std::filesystem::path& save_folder, int64_t keep, int64_t resumed_step,
                       const std::set<int64_t>& written);

// Writes save_folder/config.yaml (temporary file + rename) when a run starts, so a run
// that stops before its first checkpoint (a diverged one) still says what it trained;
// `siamese report` falls back to it. A resumed run rewrites it with its own config.
void write_run_config(const std::filesystem::path& save_folder, const std::string& config_yaml);

// The step<N> folders under save_folder, oldest first (folders whose name is not a step
// number that fits in 64 bits are skipped with a warning). Complete or not: see verify.
std::vector<std::pair<int64_t, std::filesystem::path>> checkpoint_folders(
    const std::filesystem::path& save_folder);

// Why `folder` is not a complete, intact checkpoint (missing manifest, a file missing, of
// another size or another sha256), or nullopt when it is one.
std::optional<std::string> checkpoint_problem(const std::filesystem::path& folder);

// The newest intact checkpoint under save_folder, if any; each newer one that is not
// intact is skipped with a warning saying why.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& save_folder);

// Verifies the manifest, then restores model, optimizer and RNG states; returns the train
// state. Throws siamese::Error naming the folder when it is not an intact checkpoint or does
// not match the model. With `same_model` (resuming a run), it also refuses a checkpoint
// whose saved model config differs in anything that changes what the weights compute
// (shapes, heads, topology, norms), naming the keys; dropout, initialisation and
// memory/kernel switches may differ.
TrainState load_checkpoint(const std::filesystem::path& folder, torch::nn::Module& model, AdamW* optim,
                           const ModelConfig* same_model = nullptr);

}  // namespace siamese::train
