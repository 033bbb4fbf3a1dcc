#include "siamese/train/checkpoint_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/eval/run_tokenizer.h"
#include "siamese/train/provenance.h"

namespace siamese::train {

namespace fs = std::filesystem;

CheckpointManager::CheckpointManager(const config::TrainConfig& cfg, dist::ParallelPlan& plan)
    : cfg_(cfg),
      plan_(plan),
      ranks_(plan.collectives()),
      run_dir_(cfg.save_folder),
      config_yaml_(config::to_yaml(cfg)) {
  std::exception_ptr failure;
  if (ranks_.rank() == 0) {
    try {
      lock_.emplace(run_dir_, "siamese train");
      clean_save_folder(run_dir_, *lock_);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  // The sum is also rank 0's pid on every rank (pids are far below 2^53).
  const double pid_or_failure = ranks_.sum(ranks_.rank() == 0 ? (failure ? -1.0 : double(::getpid())) : 0.0);
  if (pid_or_failure < 0) {
    if (failure) std::rethrow_exception(failure);
    throw Error("rank 0 could not take the save_folder (its log says why)", run_dir_.string());
  }
  staging_id_ = long(pid_or_failure);
}

TrainState CheckpointManager::load(model::TransformerImpl& model, Optimizer& optim, int64_t max_steps,
                                   std::vector<SettingChange>& changes) {
  const auto start = std::chrono::steady_clock::now();
  const std::optional<fs::path> from =
      cfg_.load_path.empty() ? latest_checkpoint(run_dir_) : std::optional<fs::path>(cfg_.load_path);
  const auto found = std::chrono::steady_clock::now();
  const auto existing = checkpoint_folders(run_dir_);
  const bool resuming_here =
      from && fs::weakly_canonical(*from).parent_path() == fs::weakly_canonical(run_dir_);
  if (!existing.empty() && !resuming_here && !cfg_.save_overwrite)
    throw Error(fmt::format("save_folder already holds checkpoints (step{} ... step{}) and this run "
                            "does not resume from them",
                            existing.front().first, existing.back().first),
                run_dir_.string(),
                "resume from one of them (leave load_path empty, or point it into this folder), use "
                "another save_folder, or set save_overwrite: true to write over them");
  TrainState state;
  if (from) {
    // latest_checkpoint hashed what it returns; a load_path given by hand is hashed here.
    state = load_checkpoint(*from, model, &optim, &cfg_.model, &plan_, tracked_,
                            cfg_.load_path.empty() ? ManifestCheck::VerifiedAlready : ManifestCheck::Verify);
    const auto seconds = [](auto from, auto to) { return std::chrono::duration<double>(to - from).count(); };
    // What a restart costs before its first step, hashing included (once: the loader trusts
    // what latest_checkpoint verified).
    spdlog::info("resumed from {} at step {} ({} tokens): found {:.1f} s, loaded {:.1f} s", from->string(),
                 state.step, state.tokens, seconds(start, found),
                 seconds(found, std::chrono::steady_clock::now()));
    changes = config::schema::changed_settings(saved_settings(*from), cfg_);
    for (const auto& c : changes)
      spdlog::warn("resumed with a changed setting: {} {} -> {}", c.key, c.was, c.now);
    if (state.step >= max_steps)
      spdlog::warn("the run is already at step {} of {}: nothing left to train (raise max_duration to go on)",
                   state.step, max_steps);
  }
  resumed_step_ = last_saved_ = state.step;
  return state;
}

void CheckpointManager::record_run(int64_t max_steps, const TrainState& state, const Optimizer& optim,
                                   const nlohmann::json& mixture) {
  if (ranks_.rank() != 0) return;
  write_run_config(run_dir_, config_yaml_);
  eval::keep_run_tokenizer(run_dir_, cfg_.data, cfg_.tokenizer);
  write_provenance(run_dir_, {max_steps, state.step, ranks_.world_size(), cfg_.decay_from,
                              groups_json(optim.groups(), cfg_.optimizer.learning_rate), mixture});
}

bool CheckpointManager::save(const TrainState& state, model::TransformerImpl& model, Optimizer& optim) {
  // The stall counts the wait for a save still writing: the step loop stops for both.
  const auto start = std::chrono::steady_clock::now();
  finish();
  const PartLayout layout{ranks_.rank(), ranks_.world_size(), plan_.layout().optimizer_shards(),
                          plan_.layout().optimizer_shard_rank()};
  // A synchronous save writes from the weights themselves, so they stay whole until it ends.
  const dist::WholeParams whole(plan_.gradients());
  // Every rank sees the same weights, so all stop alike. A tensor is finite when its least and
  // greatest elements are (NaN propagates to both): one read and no temporary the size of the
  // weights, where isfinite(p).all() took 10-20x as long at 336M parameters.
  std::vector<torch::Tensor> bounds;
  for (const auto& p : model.parameters()) {
    if (p.numel() == 0) continue;
    auto [least, greatest] = torch::aminmax(p.detach());
    bounds.push_back(least.to(torch::kFloat));
    bounds.push_back(greatest.to(torch::kFloat));
  }
  if (!bounds.empty() && !torch::isfinite(torch::stack(bounds)).all().item<bool>()) return false;
  const std::vector<const Stateful*> tracked(tracked_.begin(), tracked_.end());
  auto files = snapshot_checkpoint(model, optim, state, config_yaml_, layout,
                                   cfg_.save_async ? &staging_ : nullptr, tracked);
  stall_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  written_.insert(state.step);
  CheckpointWriter::Sealed sealed;
  if (ranks_.rank() == 0)
    sealed = [this, keep = cfg_.save_num_checkpoints_to_keep, resumed = resumed_step_, written = written_,
              stall = stall_seconds_, async = cfg_.save_async](const fs::path& dir, double seconds) {
      prune_checkpoints(run_dir_, keep, resumed, written);
      if (async)
        spdlog::info("saved checkpoint {} in {:.2f} s (the step loop stopped {:.2f} s for it)", dir.string(),
                     stall + seconds, stall);
      else
        spdlog::info("saved checkpoint {} in {:.2f} s", dir.string(), stall + seconds);
    };
  writer_.start({run_dir_, state.step, layout, std::move(files), config_yaml_, staging_id_},
                std::move(sealed));
  last_saved_ = state.step;
  if (!cfg_.save_async) finish();
  return true;
}

void CheckpointManager::prepare_saves(const TrainState& state, model::TransformerImpl& model,
                                      Optimizer& optim, int64_t max_steps) {
  if (!cfg_.save_async || cfg_.save_interval >= max_steps) return;
  const auto start = std::chrono::steady_clock::now();
  const PartLayout layout{ranks_.rank(), ranks_.world_size(), plan_.layout().optimizer_shards(),
                          plan_.layout().optimizer_shard_rank()};
  const dist::WholeParams whole(plan_.gradients());
  const std::vector<const Stateful*> tracked(tracked_.begin(), tracked_.end());
  snapshot_checkpoint(model, optim, state, config_yaml_, layout, &staging_, tracked);
  spdlog::info("background saves: host copies of {:.0f} MiB taken in {:.2f} s, before the first step",
               double(staging_.bytes()) / 1048576.0,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void CheckpointManager::finish() {
  if (!writer_.in_flight()) return;
  std::exception_ptr error;
  try {
    writer_.wait_written();
  } catch (...) {
    error = std::current_exception();
  }
  // Every rank's files are written (or failed) once all are here: rank 0 may seal, or discard.
  bool failed = ranks_.sum(error ? 1.0 : 0.0) > 0;
  if (!failed && ranks_.rank() == 0) {
    try {
      writer_.wait_sealed();
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (!failed && ranks_.world_size() > 1) failed = ranks_.sum(error ? 1.0 : 0.0) > 0;
  if (failed) {
    if (ranks_.rank() == 0) writer_.discard();
    if (error) std::rethrow_exception(error);
    throw Error(fmt::format("another rank could not write its part of checkpoint step{} (its log says why)",
                            last_saved_),
                run_dir_.string(),
                "free disk space or point save_folder at a disk with room; the earlier checkpoints are "
                "untouched and the run resumes from the newest of them");
  }
  longest_save_seconds_ = std::max(longest_save_seconds_, stall_seconds_ + writer_.seconds());
}

}  // namespace siamese::train
