// The training loop, torchtitan style: set up the components (the trainee, the data, the
// checkpoint manager, the step reporter, the stop policy), then one plain loop over steps.
#include "siamese/train/trainer.h"
#include "siamese/model/accounting.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <vector>

#include "siamese/common/autocast.h"
#include "siamese/common/error.h"
#include "siamese/config/duration.h"
#include "siamese/config/load.h"
#include "siamese/data/mixture_tally.h"
#include "siamese/data/rank_batches.h"
#include "siamese/eval/evaluators.h"
#include "siamese/model/kernel_choice.h"
#include "siamese/model/transformer.h"
#include "siamese/train/attention_kernels.h"
#include "siamese/train/checkpoint_manager.h"
#include "siamese/train/cost_estimate.h"
#include "siamese/train/lr_schedule.h"
#include "siamese/train/memory_plan.h"
#include "siamese/train/runtime.h"
#include "siamese/train/save_folder.h"
#include "siamese/train/setup.h"
#include "siamese/train/step_profiler.h"
#include "siamese/train/step_reporter.h"
#include "siamese/train/stop_policy.h"
#include "siamese/train/stream_stats_log.h"
#include "siamese/train/train_step.h"

namespace siamese::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The run's training data (this rank's batches, data/rank_batches.h) and the schedule over
// the run's length.
struct TrainData {
  TrainData(const config::TrainConfig& cfg, const dist::Collectives& ranks)
      : batches(config::data_section(cfg), ranks.rank(), ranks.world_size()),
        mixture(batches.dataset(), cfg.global_train_batch_size, config::data_section(cfg).seed),
        tokens_per_step(cfg.global_train_batch_size * cfg.model.max_sequence_length),
        mixture_interval(ranks.rank() == 0 ? cfg.console_log_interval : 0) {
    const RunLength length = run_length(cfg, batches.steps_per_epoch());
    max_steps = length.steps;
    token_units = length.token_units;
    schedule_max = length.schedule_max;
  }

  // The schedule's position after `state`'s step.
  double schedule_position(const TrainState& state) const {
    return token_units ? double(state.tokens) : double(state.step);
  }

  // A mixture's tokens per source, logged by rank 0 at the console's interval and at the end.
  bool mixture_due(int64_t step) const {
    return mixture.active() && mixture_interval > 0 && (step % mixture_interval == 0 || step == max_steps);
  }
  nlohmann::json mixture_plan() const {
    const auto* plan = batches.dataset().mixture();
    return plan ? nlohmann::json(plan->to_json()) : nlohmann::json(nullptr);
  }

  data::RankBatches batches;
  data::MixtureTally mixture;
  int64_t tokens_per_step, mixture_interval, max_steps = 0;
  bool token_units = false;
  double schedule_max = 0;
};

void log_start(const config::TrainConfig& cfg, const Trainee& t, const dist::ParallelPlan& plan,
               torch::Device device, const TrainData& data, int64_t first_step) {
  if (cfg.model.init_device == config::InitDevice::Meta)
    spdlog::info(
        "model.init_device meta: parameters initialised on the CPU from the seed and moved to {}, the state "
        "OLMo's deferred initialisation ends in",
        device.str());
  const std::string short_run = short_of_peak(cfg.scheduler, cfg.optimizer.learning_rate, data.schedule_max);
  if (!short_run.empty() && plan.collectives().rank() == 0) spdlog::warn("{}", short_run);
  int64_t param_bytes = 0;
  for (const auto& p : t.model->parameters()) param_bytes += p.nbytes();
  param_bytes = plan.gradients().parameter_bytes(param_bytes);
  spdlog::info(
      "distributed strategy: {}, {} rank(s); each holds {} bytes of parameters, {} bytes of gradients, {} "
      "bytes of optimizer state",
      plan.gradients().name(), plan.collectives().world_size(), param_bytes,
      plan.gradients().gradient_bytes(param_bytes), t.optim->state_bytes());
  if (plan.collectives().rank() == 0 && !t.model->shape().standard())
    spdlog::info("parametrization {}", t.model->shape().describe());
  if (plan.collectives().rank() == 0)
    for (const auto& line : describe_groups(t.optim->groups(), cfg.optimizer.learning_rate))
      spdlog::info("{}", line);
  if (plan.collectives().rank() == 0)
    for (const auto& s : data.mixture_plan())
      spdlog::info(
          "mixture: {} (target_ratio {}) gives {} instances, {:.2f}% of the run's, from its {} tokens",
          s["source_name"].get<std::string>(), s["target_ratio"].get<double>(), s["instances"].get<int64_t>(),
          100 * s["share"].get<double>(), s["population_tokens"].get<int64_t>());
  if (t.micro_batch < cfg.device_train_microbatch_size)
    spdlog::info("device_train_microbatch_size {} capped at each rank's share of the global batch, {}",
                 cfg.device_train_microbatch_size, t.micro_batch);
  spdlog::info(
      "training {} ({} parameters) on {} for {} steps: {} instances of {} tokens, global batch {} in "
      "micro-batches of {}, {} rank(s)",
      cfg.model.residual, model::count_parameters(cfg.model).total(), device.str(), data.max_steps,
      data.batches.num_instances(), cfg.model.max_sequence_length, cfg.global_train_batch_size, t.micro_batch,
      plan.collectives().world_size());
  // Before the first step, which at full scale can take minutes; the console corrects it.
  if (plan.collectives().rank() == 0 && data.max_steps > first_step)
    spdlog::info("expected duration: {}",
                 flops_bound_note(flops_bound(cfg, device), data.max_steps - first_step, device));
}

MetricsRow resume_row(int64_t step, const std::vector<SettingChange>& changes) {
  // The values each segment of the run trained with, for whoever reads the log later.
  nlohmann::ordered_json changed = nlohmann::ordered_json::object();
  for (const auto& c : changes) changed[c.key] = {{"was", c.was}, {"now", c.now}};
  return metrics_row(step, metric::kResumeEvent, {{"changed", changed}});
}

}  // namespace

int train(const config::TrainConfig& cfg, const RunControl& control) {
  // ---- setup -------------------------------------------------------------------------
  const auto started = Clock::now();  // time_limit counts from here
  dist::ParallelPlan single_process;
  dist::ParallelPlan& plan = control.plan ? *control.plan : single_process;
  dist::Collectives& ranks = plan.collectives();
  configure_cpu_runtime();
  model::use_kernels(cfg.model.kernels);
  const torch::Device device = resolve_device(cfg.device, ranks.local_rank());
  if (device.is_cuda()) configure_cuda_runtime(device, cfg.allow_tf32);
  check_device_choice(cfg.device, cfg.model, device);
  check_model_fits(cfg, device, ranks.world_size(), ranks.local_world_size());
  check_flash_attention(cfg.model, device, autocast_dtype(cfg.precision));
  StopPolicy stops(cfg.time_limit, ranks, control.stop_at, started);
  // The data before the model: a missing token file is named before gigabytes are allocated.
  TrainData data(cfg, ranks);
  Trainee t = build_trainee(cfg, device, plan);
  eval::Evaluators evaluators(config::eval_section(cfg), device, ranks);
  CheckpointManager checkpoints(cfg, plan);
  std::vector<SettingChange> changes;
  checkpoints.track(*t.scaler);
  TrainState state = checkpoints.load(*t.model, *t.optim, data.max_steps, changes);
  checkpoints.record_run(data.max_steps, state, *t.optim, data.mixture_plan());
  checkpoints.prepare_saves(state, *t.model, *t.optim, data.max_steps);
  const int64_t first_step = state.step;
  StepReporter reporter(config::report_section(cfg), device, ranks.rank() == 0, ranks.world_size(),
                        checkpoints.folder(), first_step, data.max_steps);
  if (!changes.empty()) reporter.event(resume_row(state.step, changes));
  auto save = [&]() -> int {
    if (checkpoints.save(state, *t.model, *t.optim)) return 0;
    spdlog::error(
        "step {}: the weights are no longer finite; stopping without saving them: {}; resume from it with a "
        "lower learning rate",
        state.step, last_checkpoint_note(checkpoints.folder()));
    reporter.event(metrics_row(state.step, metric::kNonfiniteEvent, {{"cause", "weights"}}));
    return kExitNonFinite;
  };
  // Every exit waits for a save still writing in the background, and agrees on it.
  auto finished = [&](int rc) {
    checkpoints.finish();
    return rc;
  };
  auto evaluate = [&] {
    for (const auto& r : evaluators.run(*t.model)) {
      spdlog::info("eval {} at step {}: loss {:.4f} nats/token, ppl {:.3f}{}", r.label, state.step, r.loss,
                   r.perplexity(),
                   r.exact_match ? fmt::format(", exact match {:.1f}%", 100 * *r.exact_match) : "");
      reporter.event(r.to_row(state.step));
    }
  };
  TrainStep step = t.step(config::step_section(cfg), plan, device);
  StepProfiler profiler(cfg.torch_profiling, checkpoints.folder(), ranks.rank(), first_step,
                        device.is_cuda());
  StreamStatsLog stream_stats(cfg.stream_stats_interval, data.batches.dataset(), t.micro_batch, device);
  if (cfg.torch_profiling && profiler.last() > data.max_steps && ranks.rank() == 0)
    spdlog::warn("torch_profiling traces steps {}-{}, and the run ends at step {}: no trace",
                 profiler.first(), profiler.last(), data.max_steps);
  log_start(cfg, t, plan, device, data, first_step);

  // ---- loop --------------------------------------------------------------------------
  data.batches.start(state.step, data.max_steps, device.is_cuda() && cfg.data.pin_memory);
  t.model->train();
  const int64_t layer_grads_every = cfg.optimizer.metrics_log_interval.value_or(0);
  const int64_t rank_rows = cfg.global_train_batch_size / ranks.world_size();
  const auto loop_start = Clock::now();
  if (ranks.rank() == 0 && state.step < data.max_steps)
    spdlog::info("first step {} begins {:.1f} s after the trainer started (data, model, checkpoint load)",
                 state.step + 1, seconds_since(started));
  while (state.step < data.max_steps) {
    const size_t start_mark = reporter.clock().mark();
    const torch::Tensor batch = data.batches.next().to(device, /*non_blocking=*/true);
    // What the filter left out of this rank's share; summed over ranks only when it is on.
    const int64_t filtered = cfg.data.instance_filter.enabled()
                                 ? int64_t(std::llround(ranks.sum(double(rank_rows - batch.size(0)))))
                                 : 0;
    if (filtered == cfg.global_train_batch_size) {
      // A step without a single instance would report loss 0 and perplexity 1 and train on
      // nothing. What this run trained so far is kept, to resume from with another filter.
      const bool trained = state.step > first_step && state.step != checkpoints.last_saved();
      if (trained) {
        if (const int rc = reporter.flush(state, *t.scaler); rc != 0) return finished(rc);
        if (const int rc = save(); rc != 0) return finished(rc);
        checkpoints.finish();
      }
      throw Error(
          fmt::format("step {}: the instance filter left out all {} instances of the global batch, so "
                      "the step has no tokens to train on",
                      state.step + 1, cfg.global_train_batch_size),
          "data.instance_filter",
          fmt::format("raise data.instance_filter.repetition_max_count (now {}) or remove "
                      "data.instance_filter, or check that data.paths holds varied text{}",
                      cfg.data.instance_filter.max_count(),
                      trained ? fmt::format("; the run resumes from step{}", state.step) : ""));
    }
    state.step += 1;  // OLMo counts the step before running it (the scheduler sees t >= 1)
    state.tokens += data.tokens_per_step;
    const double lr = learning_rate(cfg.scheduler, cfg.optimizer.learning_rate, data.schedule_position(state),
                                    data.schedule_max);
    profiler.step_begins(state.step);
    StepResult r = step.run(batch, lr, {layer_grads_every > 0 && state.step % layer_grads_every == 0});
    profiler.step_ends(state.step);
    reporter.add({state.step, state.tokens, lr, seconds_since(loop_start),
                  plan.gradients().take_comm_seconds(), filtered, std::move(r), start_mark,
                  reporter.clock().mark()});
    if (stream_stats.due(state.step)) reporter.event(stream_stats.row(state.step, *t.model));
    if (data.mixture_due(state.step)) reporter.event(data.mixture.row(state.step));

    // Read points, evaluation, checkpoints, stops.
    const bool eval_due =
        cfg.eval_interval > 0 && state.step % cfg.eval_interval == 0 && state.step < data.max_steps;
    const bool save_due =
        (cfg.save_interval > 0 && state.step % cfg.save_interval == 0) || stops.requested(state.step);
    if (reporter.read_due(state.step) || eval_due || save_due || state.step == data.max_steps) {
      if (const int rc = reporter.flush(state, *t.scaler); rc != 0) return finished(rc);
      const auto stop = stops.check(state.step, first_step, loop_start, reporter.read_interval(),
                                    checkpoints.longest_save_seconds());
      if (stop == StopPolicy::Stop::TimeLimit)
        reporter.event(metrics_row(state.step, metric::kTimeLimitEvent, {{"time_limit", *cfg.time_limit}}));
      if (stop != StopPolicy::Stop::None) {
        if (state.step != checkpoints.last_saved())
          if (const int rc = save(); rc != 0) return finished(rc);
        return finished(stop == StopPolicy::Stop::Signal ? kExitStopped : 0);
      }
    }
    if (eval_due) evaluate();
    if (save_due)
      if (const int rc = save(); rc != 0) return finished(rc);
    if (stops.requested(state.step)) {
      spdlog::info("stopping at step {} as requested", state.step);
      return finished(0);
    }
  }

  // ---- end ---------------------------------------------------------------------------
  if (!evaluators.empty()) evaluate();
  if (state.step != checkpoints.last_saved())
    if (const int rc = save(); rc != 0) return finished(rc);
  checkpoints.finish();
  spdlog::info("done: {} steps, {} tokens in {}", state.step, state.tokens,
               format_eta(seconds_since(loop_start)));
  return 0;
}

}  // namespace siamese::train
