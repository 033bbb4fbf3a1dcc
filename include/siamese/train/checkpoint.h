#pragma once
// The format of one checkpoint: save_folder/step<N>/ holding model.pt, optim.pt,
// train_state.pt (the entries of every tracked component, stateful.h: step, tokens, skipped
// bad steps, amp_fp16's loss scale, ..., then the RNG states), train_state.json (its
// scalars, for people), config.yaml (the resolved
// config) and, written last, manifest.json (the step, the config and each file's size and
// sha256). The files are written into .step<N>.tmp-<pid>/ (scratch_path, durable_file.h),
// each fsynced, then the folder is fsynced and renamed into place: a save cut short never
// leaves a folder named step<N>, nor does a pruning (save_folder.h renames before deleting),
// and loading verifies the manifest, so bytes that changed on disk are refused. The folder
// that holds checkpoints (lock, clean-up, pruning, the newest one) is save_folder.h.
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/config/schema.h"
#include "siamese/dist/parallel_plan.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/stateful.h"

namespace siamese::train {

// Written last into a checkpoint folder: its presence says the save finished.
inline constexpr const char* kCheckpointManifest = "manifest.json";

// The run's position: what every checkpoint holds, whatever else it tracks.
struct TrainState : Stateful {
  TrainState(int64_t step = 0, int64_t tokens = 0, int64_t bad_steps = 0)
      : step(step), tokens(tokens), bad_steps(bad_steps) {}
  int64_t step;    // optimizer steps completed; also the position in the data order
  int64_t tokens;  // training tokens consumed (global)
  int64_t bad_steps;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;
};

// Writes step<state.step> under save_folder; config_yaml is the resolved config (to_yaml).
// train_state.pt holds `state`'s entries, then those of each of `tracked` (the loss scaler,
// ...), then the CPU and CUDA RNG states; two components naming one entry is an error.
// A step<N> that already exists (a resumed run saving the same step again) is renamed to
// .step<N>.old-<pid> first and removed once the new one is in place, so a complete copy
// exists at every moment. Any write error (a full disk) throws siamese::Error naming the
// file and the free space, after removing the temporary folder; the other checkpoints are
// untouched. Called on rank 0 only: every rank holds the same weights.
// With optimizer_shards N > 1 (a sharded strategy), each of the N ranks has first written its
// shard of the optimizer state with save_optimizer_shard; this checks each against the
// shard's manifest and moves it into the checkpoint, whose manifest then lists them all.
std::filesystem::path save_checkpoint(const std::filesystem::path& save_folder, torch::nn::Module& model,
                                      Optimizer& optim, const TrainState& state,
                                      const std::string& config_yaml, int optimizer_shards = 1,
                                      const std::vector<const Stateful*>& tracked = {});

// Called on every rank of a sharded strategy before rank 0's save_checkpoint: writes this
// rank's optimizer state, optim_shard<rank>of<shards>.pt, and its manifest (bytes, sha256)
// into save_folder/.step<N>.shards-<shards>/, which a save cut short leaves for
// clean_save_folder. Nothing with one shard (rank 0 writes optim.pt whole) or with rank -1
// (a replica whose twin in the first replica writes the same shard).
void save_optimizer_shard(const std::filesystem::path& save_folder, int64_t step, Optimizer& optim, int rank,
                          int shards);
std::string optimizer_shard_name(int rank, int shards);

// Why `folder` is not a complete, intact checkpoint (no manifest or one that does not parse,
// a file missing, of another size or another sha256, no model.pt / train_state.pt /
// config.yaml listed, a config in the manifest that differs from config.yaml), or nullopt
// when it is one. Reads every file whole to hash it.
std::optional<std::string> checkpoint_problem(const std::filesystem::path& folder);

// Whether load_checkpoint hashes the files against the manifest, or trusts the check this
// process has just made of the same folder (latest_checkpoint's), so that a resume reads each
// file's bytes to hash them once, not twice (at OLMo-1B 14 GB of them).
enum class ManifestCheck { Verify, VerifiedAlready };

// Verifies the manifest (checkpoint_problem; with VerifiedAlready only that it is there), then
// restores the model, the optimizer (when
// `optim` is not null), each of `tracked` and the CPU and CUDA RNG states; returns the train
// state. Throws
// siamese::Error naming the folder when it is not an intact checkpoint or does not match the
// model. With `same_model` (resuming a run), it first reads the saved config.yaml through
// load_config (no launch settings, so the caller's MODEL_TYPE cannot change it) and refuses
// the checkpoint when any model.* key of the schema differs, naming each key with both
// values, except the keys marked changeable_on_resume() in schema.cpp (dropout,
// initialisation, flash_attention, init_device), which change how the weights are trained
// or computed, not what they mean.
// Optimizer state saved by any number of ranks is put together whole, then cut into the
// shards of `plan` (null: one process), so a run may resume on another world size.
TrainState load_checkpoint(const std::filesystem::path& folder, torch::nn::Module& model, Optimizer* optim,
                           const config::ModelConfig* same_model = nullptr,
                           dist::ParallelPlan* plan = nullptr, const std::vector<Stateful*>& tracked = {},
                           ManifestCheck check = ManifestCheck::Verify);

using SettingChange = config::schema::SettingChange;
// The training settings of the config the checkpoint in `folder` was trained with (learning
// rate, batch size, schedule, duration, ...; config::schema::training_settings), so that a
// resumed run can say what it changed.
std::map<std::string, std::string> saved_settings(const std::filesystem::path& folder);

}  // namespace siamese::train
