#pragma once
// The format of one checkpoint: save_folder/step<N>/ holding the model's tensors, the
// optimizer's state, train_state.pt (the entries of every tracked component, stateful.h:
// step, tokens, skipped bad steps, amp_fp16's loss scale, ..., then the RNG states),
// train_state.json (its scalars, for people), config.yaml (the resolved config) and, written
// last, manifest.json (the step, the layout, the config and each file's size and sha256).
// One process writes model.pt and optim.pt. N ranks write one part each: model_part<r>of<N>.pt
// (each rank about 1/N of the tensors, whole), and optim_shard<s>of<M>.pt (its flat shard,
// under a sharded strategy) or optim_part<r>of<N>.pt (the state of its tensors, under ddp).
// Every rank writes into .step<N>.tmp-<pid of rank 0>/ (durable_file.h), each file fsynced;
// rank 0 writes the manifest once every rank has reported, fsyncs the folder and renames it
// into place: a save cut short never leaves a folder named step<N>, nor does a pruning
// (save_folder.h renames before deleting), and loading verifies the manifest, so bytes that
// changed on disk are refused. The folder that holds checkpoints (lock, clean-up, pruning,
// the newest one) is save_folder.h; the background writer is checkpoint_writer.h.
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
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

// A tensor of a checkpoint file, by the name it is written under.
struct ArchiveEntry {
  std::string key;
  torch::Tensor value;
  bool buffer = false;
};

// One file of a checkpoint, held in host memory until it is written: a torch archive of
// `tensors`, or `text`.
struct CheckpointFile {
  static CheckpointFile of_tensors(std::string name, std::vector<ArchiveEntry> tensors = {}) {
    return {std::move(name), std::move(tensors), {}, true};
  }
  static CheckpointFile of_text(std::string name, std::string text) {
    return {std::move(name), {}, std::move(text), false};
  }
  std::string name;
  std::vector<ArchiveEntry> tensors;
  std::string text;
  bool archive;
};

// Who writes what: writer `rank` of `parts` (the world size), and the optimizer's layout
// (optimizer_shards > 1: a sharded strategy, whose shard `optimizer_shard_rank` this rank
// writes, -1 for a replica whose twin in the first replica writes it).
struct PartLayout {
  int rank = 0;
  int parts = 1;
  int optimizer_shards = 1;
  int optimizer_shard_rank = 0;
};

// The host memory a background save (save_async) copies into, so that training may go on
// while it is written. Each tensor keeps its buffer from save to save: a fresh copy faulted in
// every page again, which made the measured stall several times longer (docs/reliability.md,
// "Costs"). A GPU tensor's buffer is pinned, so its copy is a DMA the step waits for once.
// A buffer is reused only by the next save, which starts after the previous one is written.
class HostStaging {
 public:
  // `t`'s values in `name`'s buffer; the copies of GPU tensors are done after synchronize().
  torch::Tensor copy(const std::string& name, const torch::Tensor& t);
  void synchronize();
  int64_t bytes() const;                                // of every buffer held
  int64_t allocations() const { return allocations_; }  // buffers made so far

 private:
  std::map<std::string, torch::Tensor> buffers_;
  bool pending_ = false;
  int64_t allocations_ = 0;
};

// This rank's files of checkpoint step<state.step>, in host memory. Rank 0's also hold
// `state`'s entries, then those of each of `tracked` (two components naming one entry is an
// error), the CPU and CUDA RNG states, and the config. Tensors are copied into `staging`;
// without it, host memory is referenced as it is (a save the caller waits for, which would
// otherwise hold a second copy of the model and the optimizer state), and the parameters must
// stay whole (dist::WholeParams) until the files are written.
std::vector<CheckpointFile> snapshot_checkpoint(torch::nn::Module& model, Optimizer& optim,
                                                const TrainState& state, const std::string& config_yaml,
                                                const PartLayout& layout, HostStaging* staging,
                                                const std::vector<const Stateful*>& tracked = {});

// The manifest of step<step> without its files: what the loader needs to find them.
nlohmann::ordered_json manifest_head(int64_t step, const PartLayout& layout, const std::string& config_yaml);

// The names of a layout's files (tests and the checker use them).
std::string model_part_name(int rank, int parts);
std::string optimizer_part_name(int rank, int parts);
std::string optimizer_shard_name(int rank, int shards);

// Writes step<state.step> under save_folder as one process, before it returns (the import,
// tests); config_yaml is the resolved config (to_yaml). A step<N> that already exists (a
// resumed run saving the same step again) is renamed to .step<N>.old-<pid> first and removed
// once the new one is in place, so a complete copy exists at every moment. Any write error
// (a full disk) throws siamese::Error naming the file and the free space, after removing the
// temporary folder; the other checkpoints are untouched.
std::filesystem::path save_checkpoint(const std::filesystem::path& save_folder, torch::nn::Module& model,
                                      Optimizer& optim, const TrainState& state,
                                      const std::string& config_yaml,
                                      const std::vector<const Stateful*>& tracked = {});

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
// Tensors and optimizer state saved by any number of ranks are put together whole, then
// cut into the shards of `plan` (null: one process), so a run may resume on another world
// size or strategy.
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
