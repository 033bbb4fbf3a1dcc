// The training loop, nanoGPT style: set up, then one plain loop over optimizer steps.
#include "siamese/train/trainer.h"
#include "siamese/model/accounting.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "siamese/analysis/grad_norms.h"
#include "siamese/common/autocast.h"
#include "siamese/common/error.h"
#include "siamese/config/duration.h"
#include "siamese/config/load.h"
#include "siamese/data/batch_order.h"
#include "siamese/data/instance_filter.h"
#include "siamese/data/prefetcher.h"
#include "siamese/data/token_dataset.h"
#include "siamese/eval/evaluators.h"
#include "siamese/eval/run_tokenizer.h"
#include "siamese/model/transformer.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/device_clock.h"
#include "siamese/train/loss_scale.h"
#include "siamese/train/lr_schedule.h"
#include "siamese/train/metrics.h"
#include "siamese/train/optimizer.h"
#include "siamese/train/provenance.h"
#include "siamese/train/rank_agreement.h"
#include "siamese/train/runtime.h"
#include "siamese/train/save_folder.h"
#include "siamese/train/tensorboard.h"
#include "siamese/train/train_step.h"

namespace siamese::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The longest silence between console progress lines of a running train.
constexpr double kConsoleSeconds = 30.0;

std::string format_eta(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60)
                   : fmt::format("{}m{:02}s", s / 60, s % 60);
}

// Optimizer steps in the run: max_duration in steps, or tokens rounded up to whole global
// batches (OLMo), or epochs of the training data.
int64_t total_steps(const Duration& d, int64_t tokens_per_step, int64_t steps_per_epoch) {
  switch (d.unit) {
    case Duration::Steps:
      return d.value;
    case Duration::Tokens:
      return (d.value + tokens_per_step - 1) / tokens_per_step;
    case Duration::Epochs:
      return d.value * steps_per_epoch;
  }
  return d.value;
}

}  // namespace

int train(const TrainConfig& cfg, const RunControl& control) {
  // ---- setup -------------------------------------------------------------------------
  const auto started = Clock::now();  // time_limit counts from here
  GradientSync single_process;
  GradientSync& sync = control.sync ? *control.sync : single_process;
  const bool main_rank = sync.rank() == 0;
  configure_cpu_runtime();
  install_stop_handlers();
  const torch::Device device = resolve_device(cfg.device, sync.local_rank());
  if (device.is_cuda()) configure_cuda_runtime(device, cfg.allow_tf32);
  const fs::path run_dir = cfg.save_folder;
  const std::string config_yaml = to_yaml(cfg);

  check_model_fits(cfg.model, device);
  torch::manual_seed(cfg.seed);
  model::Transformer model(cfg.model);
  model->to(device);
  if (cfg.model.init_device == "meta")
    spdlog::info(
        "model.init_device meta: parameters initialised on the CPU from the seed and "
        "moved to {}, the state OLMo's deferred initialisation ends in",
        device.str());
  check_ranks_agree(sync, cfg, device);
  sync.attach(model->parameters());
  const WholeParamsOf whole_params{model->named_parameters(), &sync};
  auto optim = build_optimizer(cfg.optimizer, sync.optimizer_params(whole_params.params), &whole_params);
  model->set_block_hooks(sync.block_hooks());
  optim->allocate_state();
  int64_t param_bytes = 0;
  for (const auto& p : model->parameters()) param_bytes += p.nbytes();
  param_bytes = sync.parameter_bytes(param_bytes);
  spdlog::info(
      "distributed strategy: {}, {} rank(s); each holds {} bytes of parameters, {} bytes of gradients, {} "
      "bytes of optimizer state",
      sync.strategy(), sync.world_size(), param_bytes, sync.gradient_bytes(param_bytes),
      optim->state_bytes());
  data::TokenDataset dataset = data::train_dataset(cfg);
  const int64_t T = cfg.model.max_sequence_length;
  const int64_t global_batch = cfg.global_train_batch_size;
  const int64_t tokens_per_step = global_batch * T;
  data::BatchOrder order(dataset.size(), global_batch,
                         static_cast<uint64_t>(cfg.data.seed.value_or(cfg.seed)), sync.rank(),
                         sync.world_size());
  const Duration duration = parse_duration(cfg.max_duration);
  const int64_t max_steps = total_steps(duration, tokens_per_step, order.steps_per_epoch());
  const bool token_units = cfg.scheduler.units == "tokens";
  const double schedule_max =
      token_units
          ? (duration.unit == Duration::Tokens ? double(duration.value) : double(max_steps) * tokens_per_step)
          : double(max_steps);
  const int64_t micro = std::min(cfg.device_train_microbatch_size, global_batch / sync.world_size());
  if (micro < cfg.device_train_microbatch_size)
    spdlog::info("device_train_microbatch_size {} capped at each rank's share of the global batch, {}",
                 cfg.device_train_microbatch_size, micro);
  eval::Evaluators evaluators(cfg, device, sync);
  const double flops_per_token = model::flops_per_token(cfg.model, T);
  const std::optional<double> peak_flops =
      cfg.peak_tflops ? std::optional<double>(*cfg.peak_tflops * 1e12 * sync.world_size()) : std::nullopt;
  const std::optional<at::ScalarType> autocast = autocast_dtype(cfg.precision);
  check_flash_attention(cfg.model, device, autocast);
  LossScaler scaler(cfg.precision == "amp_fp16", cfg.fp16_initial_loss_scale,
                    cfg.fp16_loss_scale_growth_interval, device);

  // One writer per save_folder: rank 0 (the rank that writes) takes the lock and clears
  // what interrupted saves left; every rank learns whether it could, so none waits forever.
  std::optional<SaveFolderLock> lock;
  std::exception_ptr lock_failure;
  if (main_rank) {
    try {
      lock.emplace(run_dir);
      clean_save_folder(run_dir, *lock);
    } catch (...) {
      lock_failure = std::current_exception();
    }
  }
  if (sync.sum(lock_failure ? 1.0 : 0.0) > 0) {
    if (lock_failure) std::rethrow_exception(lock_failure);
    throw Error("rank 0 could not take the save_folder (its log says why)", run_dir.string());
  }

  // Resume: an explicit load_path, else the newest intact checkpoint of this run.
  TrainState state;
  std::optional<fs::path> resume_from;
  if (!cfg.load_path.empty())
    resume_from = fs::path(cfg.load_path);
  else
    resume_from = latest_checkpoint(run_dir);
  const auto existing = checkpoint_folders(run_dir);
  const bool resuming_here =
      resume_from && fs::weakly_canonical(*resume_from).parent_path() == fs::weakly_canonical(run_dir);
  if (!existing.empty() && !resuming_here && !cfg.save_overwrite)
    throw Error(fmt::format("save_folder already holds checkpoints (step{} ... step{}) and this run "
                            "does not resume from them",
                            existing.front().first, existing.back().first),
                run_dir.string(),
                "resume from one of them (leave load_path empty, or point it into this folder), use "
                "another save_folder, or set save_overwrite: true to write over them");
  std::vector<SettingChange> changes;
  if (resume_from) {
    state = load_checkpoint(*resume_from, *model, optim.get(), &cfg.model, &sync);
    spdlog::info("resumed from {} at step {} ({} tokens)", resume_from->string(), state.step, state.tokens);
    changes = changed_settings(*resume_from, cfg);
    for (const auto& c : changes)
      spdlog::warn("resumed with a changed setting: {} {} -> {}", c.key, c.was, c.now);
    if (state.step >= max_steps)
      spdlog::warn("the run is already at step {} of {}: nothing left to train (raise max_duration to go on)",
                   state.step, max_steps);
    if (state.loss_scale > 0) scaler.restore(state.loss_scale, state.loss_scale_good_steps);
  }
  const int64_t resumed_step = state.step;
  std::set<int64_t> written;  // steps this run saved: with the older ones, the prunable
  std::optional<MetricsLog> metrics;
  std::optional<TensorBoardWriter> tensorboard;  // the same rows, for TensorBoard and W&B
  if (main_rank) {
    write_run_config(run_dir, config_yaml);
    eval::keep_run_tokenizer(run_dir, cfg);
    write_provenance(run_dir, {max_steps, state.step, sync.world_size()});
    metrics.emplace(run_dir / "metrics.jsonl", state.step);
    tensorboard.emplace(run_dir / "tensorboard");
  }
  auto log_event = [&](const MetricsRow& row) {
    if (metrics) metrics->write(row);
    if (tensorboard) tensorboard->write_row(row);
  };
  if (!changes.empty()) {
    // The values each segment of the run trained with, for whoever reads the log later.
    nlohmann::ordered_json changed = nlohmann::ordered_json::object();
    for (const auto& c : changes) changed[c.key] = {{"was", c.was}, {"now", c.now}};
    log_event(metrics_row(state.step, metric::kResumeEvent, {{"changed", changed}}));
  }

  const auto params = model->parameters();
  // Rank 0 writes (every rank holds the same weights); the others wait so nobody runs
  // ahead of, or exits before, a checkpoint that is still being written. Weights that are
  // no longer finite are never saved: every rank sees the same ones and stops alike.
  double longest_save_seconds = 0;  // what time_limit keeps in hand for the final save
  auto save = [&]() -> int {
    const auto save_start = Clock::now();
    const WholeParams whole(sync);
    std::vector<torch::Tensor> finite;
    for (const auto& p : params) finite.push_back(torch::isfinite(p).all());
    if (!torch::stack(finite).all().item<bool>()) {
      spdlog::error(
          "step {}: the weights are no longer finite; stopping without saving them. "
          "The last checkpoint in {} is untouched; resume from it with a lower "
          "learning rate",
          state.step, run_dir.string());
      log_event(metrics_row(state.step, metric::kNonfiniteEvent, {{"cause", "weights"}}));
      return kExitNonFinite;
    }
    state.loss_scale = scaler.enabled() ? scaler.scale() : 0;
    state.loss_scale_good_steps = scaler.enabled() ? scaler.good_steps() : 0;
    // A sharded strategy's ranks each write their optimizer shard first; rank 0 writes the
    // rest and the manifest, the index that makes the shards a checkpoint, last.
    save_optimizer_shard(run_dir, state.step, *optim, sync.optimizer_shard_rank(), sync.optimizer_shards());
    sync.barrier();
    if (main_rank) {
      auto dir = save_checkpoint(run_dir, *model, *optim, state, config_yaml, sync.optimizer_shards());
      written.insert(state.step);
      prune_checkpoints(run_dir, cfg.save_num_checkpoints_to_keep, resumed_step, written);
      spdlog::info("saved checkpoint {}", dir.string());
    }
    sync.barrier();
    longest_save_seconds = std::max(longest_save_seconds, seconds_since(save_start));
    return 0;
  };
  auto evaluate = [&] {
    for (const auto& r : evaluators.run(*model)) {
      spdlog::info("eval {} at step {}: loss {:.4f} nats/token, ppl {:.3f}{}", r.label, state.step, r.loss,
                   r.perplexity(),
                   r.exact_match ? fmt::format(", exact match {:.1f}%", 100 * *r.exact_match) : "");
      log_event(r.to_row(state.step));
    }
  };
  TrainStep step(cfg, *model, *optim, sync, scaler, device, micro);
  SpikeDetector spikes(cfg.loss_spike_factor);
  spdlog::info(
      "training {} ({} parameters) on {} for {} steps: {} instances of {} tokens, "
      "global batch {} in micro-batches of {}, {} rank(s)",
      cfg.model.residual, model::count_parameters(cfg.model).total(), device.str(), max_steps, dataset.size(),
      T, global_batch, micro, sync.world_size());

  // Steps run ahead of the host: each leaves its loss, gradient norm and time on the device,
  // and the host reads them in one copy at a read point. On CUDA that is once per
  // console_log_interval and before any evaluation, checkpoint or stop, so the GPU never
  // idles while the host waits; on CPU reading is free and happens every step.
  struct PendingStep {
    int64_t step, tokens;
    double lr, elapsed, comm_seconds;
    int64_t filtered;      // instances the instance filter left out, all ranks
    torch::Tensor values;  // float64 [6] on the device: loss, grad norm, loss scale, z-loss, MoE losses
    std::optional<MoeLoad> moe_load;
    size_t start_mark, end_mark;
  };
  std::vector<PendingStep> pending;
  DeviceClock clock(device);
  const int64_t read_interval = device.is_cuda() ? cfg.console_log_interval : 1;
  const auto start = Clock::now();
  auto last_console = start;
  const int64_t first_step = state.step;
  // Writes the pending steps' metrics. A non-finite step was already skipped on the device
  // (its update cancelled); here it is counted, and past max_bad_steps the run stops.
  auto read_pending = [&]() -> int {
    if (pending.empty()) return 0;
    std::vector<torch::Tensor> values;
    for (const auto& p : pending) values.push_back(p.values);
    const auto host = torch::stack(values).cpu();
    const auto v = host.accessor<double, 2>();
    const double peak_mib = peak_memory_mib(device);
    for (size_t i = 0; i < pending.size(); ++i) {
      const PendingStep& p = pending[i];
      const double loss = v[i][0], grad_norm = v[i][1], loss_scale = v[i][2], z_loss = v[i][3];
      // The step was skipped on the device when either loss was not finite (train_step.cpp).
      const bool finite_loss = std::isfinite(loss) && std::isfinite(z_loss);
      // An fp16 overflow is routine while the scale settles: skipped, not a bad step. With
      // no scaling left (S <= 1) the gradients themselves overflow, and it is one.
      if (scaler.enabled() && finite_loss && !std::isfinite(grad_norm) && loss_scale > 1) {
        spdlog::info(
            "step {}: fp16 gradients overflowed at loss scale {}; step skipped, scale "
            "now {}",
            p.step, loss_scale, loss_scale / 2);
        log_event(metrics_row(p.step, "overflow", {{"loss", loss}, {"loss_scale", loss_scale}}));
        continue;
      }
      if (!finite_loss || !std::isfinite(grad_norm)) {
        const std::string cause = !finite_loss ? "loss" : "grad_norm";
        MetricsRow row = metrics_row(p.step, metric::kNonfiniteEvent,
                                     {{"cause", cause}, {"loss", loss}, {"grad_norm", grad_norm}});
        if (cfg.softmax_auxiliary_loss) row[metric::kZLoss] = z_loss;
        log_event(row);
        if (state.bad_steps < cfg.max_bad_steps) {
          state.bad_steps += 1;
          spdlog::warn("step {}: non-finite {} (loss {}, grad norm {}); skipped ({} of {} allowed)", p.step,
                       cause, loss, grad_norm, state.bad_steps, cfg.max_bad_steps);
          continue;
        }
        spdlog::error(
            "step {}: non-finite {} (loss {}, grad norm {}); stopping. The last "
            "checkpoint in {} is untouched; resume from it with a lower learning rate "
            "or set max_bad_steps to skip such steps",
            p.step, cause, loss, grad_norm, run_dir.string());
        return kExitNonFinite;
      }
      StepMetrics m;
      m.step = p.step;
      m.tokens = p.tokens;
      m.loss = loss;
      if (cfg.softmax_auxiliary_loss) m.z_loss = z_loss;
      if (cfg.model.block_type == "moe") {
        m.moe_lbl_loss = v[i][4];
        m.moe_z_loss = v[i][5];
        m.moe_load = p.moe_load;
      }
      m.lr = p.lr;
      m.grad_norm = grad_norm;
      m.step_seconds = clock.seconds(p.start_mark, p.end_mark);
      m.step_tokens = tokens_per_step;
      m.flops_per_token = flops_per_token;
      m.peak_flops = peak_flops;
      m.elapsed = p.elapsed;
      m.loss_spike = spikes.observe(loss);
      m.comm_seconds = p.comm_seconds;
      m.peak_memory_mib = peak_mib;
      if (scaler.enabled()) m.loss_scale = loss_scale;
      if (cfg.data.instance_filter.enabled()) m.filtered_instances = p.filtered;
      log_event(m.to_row());
      if (p.filtered > 0)
        spdlog::info("step {}: the instance filter left out {} instance(s) with repeated n-grams", p.step,
                     p.filtered);
      if (m.loss_spike) spdlog::warn("step {}: loss spike {:.4f}", p.step, loss);
      // A console line after the first step (with the run's expected length), then every
      // console_log_interval steps or kConsoleSeconds, whichever comes first, and at the end.
      const bool first = p.step == first_step + 1;
      if (first || p.step % cfg.console_log_interval == 0 || p.step == max_steps ||
          seconds_since(last_console) >= kConsoleSeconds) {
        last_console = Clock::now();
        const double per_step = m.elapsed / double(p.step - first_step);
        spdlog::info(
            "[{}/{}] loss {:.4f} nats/token{}, lr {:.3e}, grad_norm {:.3f}, {:.0f} tokens/s{}, mem {:.0f} "
            "MiB, "
            "ETA {}",
            p.step, max_steps, loss, m.z_loss ? fmt::format(", z_loss {:.3e}", *m.z_loss) : "", p.lr,
            grad_norm, m.tokens_per_sec(), m.mfu() ? fmt::format(", MFU {:.1f}%", 100 * *m.mfu()) : "",
            peak_mib, format_eta(per_step * double(max_steps - p.step)));
        if (first && max_steps > p.step)
          spdlog::info(
              "expected duration at the first step's speed: {} for {} steps (the first step includes "
              "warm-up)",
              format_eta(per_step * double(max_steps - first_step)), max_steps - first_step);
      }
    }
    pending.clear();
    clock.keep_last();
    return 0;
  };

  // ---- loop --------------------------------------------------------------------------
  std::mutex order_mutex;  // BatchOrder caches the epoch's permutation
  data::BatchPrefetcher batches(
      [&](int64_t step) {
        std::vector<int64_t> indices;
        {
          std::lock_guard<std::mutex> lock(order_mutex);
          indices = order.rank_batch(step);
        }
        int64_t dropped = 0;
        torch::Tensor batch = data::keep_instances(dataset.batch(indices), cfg.data.instance_filter, dropped);
        return device.is_cuda() && cfg.data.pin_memory ? batch.pin_memory() : batch;
      },
      state.step, max_steps, cfg.data.num_workers);
  model->train();
  int64_t last_saved = state.step;
  while (state.step < max_steps) {
    const size_t start_mark = clock.mark();
    const torch::Tensor batch = batches.next().to(device, /*non_blocking=*/true);
    // What the filter left out of this rank's share; summed over ranks only when it is on.
    const int64_t filtered =
        cfg.data.instance_filter.enabled()
            ? int64_t(std::llround(sync.sum(double(global_batch / sync.world_size() - batch.size(0)))))
            : 0;
    state.step += 1;  // OLMo counts the step before running it (the scheduler sees t >= 1)
    state.tokens += tokens_per_step;

    const double t = token_units ? double(state.tokens) : double(state.step);
    const double lr = learning_rate(cfg.scheduler, cfg.optimizer.learning_rate, t, schedule_max);
    const int64_t layer_grads_every = cfg.optimizer.metrics_log_interval.value_or(0);
    const bool log_layer_grads = layer_grads_every > 0 && state.step % layer_grads_every == 0;
    const StepResult r = step.run(batch, lr, [&] {
      if (!log_layer_grads) return;
      const auto norms = analysis::per_layer_grad_norms(optim->named_params(), cfg.model.n_layers, sync);
      if (main_rank) log_event(analysis::layer_grad_norms_row(state.step, norms));
    });
    const torch::Tensor values =
        torch::stack({r.loss, r.grad_norm, r.loss_scale, r.z_loss, r.moe_lbl_loss, r.moe_z_loss});
    pending.push_back({state.step, state.tokens, lr, seconds_since(start), sync.take_comm_seconds(), filtered,
                       values, r.moe_load, start_mark, clock.mark()});

    // Read points, evaluation, checkpoints, stops.
    const bool eval_due =
        cfg.eval_interval > 0 && state.step % cfg.eval_interval == 0 && state.step < max_steps;
    const bool save_due =
        (cfg.save_interval > 0 && state.step % cfg.save_interval == 0) || state.step == control.stop_at;
    if (state.step % read_interval == 0 || eval_due || save_due || state.step == max_steps) {
      if (const int rc = read_pending(); rc != 0) return rc;
      // Ranks agree on stopping (a signal may reach them at different steps).
      if (const int sig = stop_signal(); sync.sum(sig != 0 ? 1.0 : 0.0) > 0) {
        spdlog::warn("signal {} received: saving at step {} and stopping", sig, state.step);
        if (state.step != last_saved)
          if (const int rc = save(); rc != 0) return rc;
        return kExitStopped;
      }
      // time_limit: stop while a checkpoint still fits, judged at the last check before the
      // limit (the next one is read_interval steps away at the mean step time so far).
      if (cfg.time_limit) {
        const double per_step = seconds_since(start) / double(state.step - first_step);
        const double at_next_check = seconds_since(started) + per_step * double(read_interval);
        if (sync.sum(at_next_check + longest_save_seconds >= *cfg.time_limit ? 1.0 : 0.0) > 0) {
          spdlog::info(
              "stopping at step {}: time_limit {} s would pass before the next check; resume with "
              "the same command",
              state.step, *cfg.time_limit);
          log_event(metrics_row(state.step, metric::kTimeLimitEvent, {{"time_limit", *cfg.time_limit}}));
          if (state.step != last_saved)
            if (const int rc = save(); rc != 0) return rc;
          return 0;
        }
      }
    }
    if (eval_due) evaluate();
    if (save_due) {
      if (const int rc = save(); rc != 0) return rc;
      last_saved = state.step;
    }
    if (state.step == control.stop_at) {
      spdlog::info("stopping at step {} as requested", state.step);
      return 0;
    }
  }

  // ---- end ---------------------------------------------------------------------------
  if (!evaluators.empty()) evaluate();
  if (state.step != last_saved)
    if (const int rc = save(); rc != 0) return rc;
  spdlog::info("done: {} steps, {} tokens in {}", state.step, state.tokens, format_eta(seconds_since(start)));
  return 0;
}

}  // namespace siamese::train
