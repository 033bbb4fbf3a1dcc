#pragma once
// The save folder's lifecycle for one run (torchtitan's CheckpointManager): one writer per
// folder (rank 0 takes its lock and clears what interrupted saves left; every rank learns
// whether it could), the resume (an explicit load_path, else the newest intact checkpoint of
// this run; never over a foreign run's checkpoints), the save (each rank copies its part to
// host memory and writes it on a background thread, checkpoint_writer.h; rank 0 seals it) and
// the pruning of older checkpoints. Every rank agrees whether a save held at the next save or
// at finish(), so a failed one stops every rank alike.
#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/dist/parallel_plan.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/checkpoint_writer.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/save_folder.h"
#include "siamese/train/stateful.h"

namespace siamese::train {

class CheckpointManager {
 public:
  // Takes the save folder (rank 0) or throws on every rank when rank 0 could not.
  CheckpointManager(const config::TrainConfig& cfg, dist::ParallelPlan& plan);

  // Checkpoints `component`'s state too (the loss scaler; an EMA, a data mixture): every
  // save writes it and load() restores it. It must outlive the manager's saves and loads.
  void track(Stateful& component) { tracked_.push_back(&component); }

  // The state to start from: the resumed checkpoint's (weights, optimizer state and every
  // tracked component loaded), or a fresh one. `changes` receives the settings that differ.
  TrainState load(model::TransformerImpl& model, Optimizer& optim, int64_t max_steps,
                  std::vector<SettingChange>& changes);

  // Rank 0 records the run beside its checkpoints: the resolved config, the tokenizer and
  // the launch's provenance (with the optimizer's groups).
  void record_run(int64_t max_steps, const TrainState& state, const Optimizer& optim,
                  const nlohmann::json& mixture);

  // With save_async, when the run saves before its last step (save_interval < max_steps): takes
  // the host copies background saves write from once, before the first step, so that the first
  // save's stall does not include allocating and faulting in a copy of the model and the
  // optimizer state (at 336M parameters 11.8 s of a 12-13 s stall; later ones 1.3-1.5 s).
  void prepare_saves(const TrainState& state, model::TransformerImpl& model, Optimizer& optim,
                     int64_t max_steps);
  // Saves step<state.step> (every rank calls it), after the previous save is sealed. With
  // save_async it returns once this rank's part is copied to host memory, else once the
  // checkpoint is in place. False, and nothing written, when the weights are no longer finite.
  // Throws on every rank when a rank's write or the seal failed (a full disk).
  bool save(const TrainState& state, model::TransformerImpl& model, Optimizer& optim);
  // Waits for the save in flight and agrees on it as save() does: before the run exits.
  void finish();

  int64_t last_saved() const { return last_saved_; }
  const HostStaging& staging() const { return staging_; }
  // The longest save so far, from the loop's stop to the seal: what a time limit keeps in
  // hand for the final one.
  double longest_save_seconds() const { return longest_save_seconds_; }
  const std::filesystem::path& folder() const { return run_dir_; }

 private:
  const config::TrainConfig& cfg_;
  dist::ParallelPlan& plan_;
  dist::Collectives& ranks_;
  std::filesystem::path run_dir_;
  std::string config_yaml_;
  std::optional<SaveFolderLock> lock_;
  std::vector<Stateful*> tracked_;
  int64_t resumed_step_ = 0, last_saved_ = 0;
  std::set<int64_t> written_;  // steps this run saved: with the older ones, the prunable
  double longest_save_seconds_ = 0, stall_seconds_ = 0;
  long staging_id_ = 0;  // rank 0's pid, which names every save's staging folder
  HostStaging staging_;  // save_async: the host copies, reused from save to save
  CheckpointWriter writer_;
};

}  // namespace siamese::train
