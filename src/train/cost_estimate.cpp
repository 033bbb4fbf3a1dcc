#include "siamese/train/cost_estimate.h"

#include <fmt/format.h>

#include <map>

#include "siamese/config/load.h"
#include "siamese/config/sections.h"
#include "siamese/data/token_dataset.h"
#include "siamese/model/accounting.h"
#include "siamese/train/bench.h"
#include "siamese/train/console_log.h"
#include "siamese/train/runtime.h"

namespace siamese::train {

FlopsBound flops_bound(const config::TrainConfig& cfg, torch::Device device) {
  FlopsBound b;
  const int64_t T = cfg.model.max_sequence_length;
  b.tokens_per_step = double(cfg.global_train_batch_size) * double(T);
  b.flops_per_step = model::flops_per_token(cfg.model, T) * b.tokens_per_step;
  b.matmul_flops = measured_matmul_flops(device, cfg.precision, /*quick=*/true);
  b.seconds_per_step = b.flops_per_step / b.matmul_flops;
  return b;
}

std::string flops_bound_note(const FlopsBound& b, int64_t steps, torch::Device device) {
  const double s = b.seconds_per_step * double(steps);
  return fmt::format(
      "at least {} for {} steps ({:.3g} training FLOPs a step at the {:.3g} GFLOP/s this machine's matmuls "
      "reach "
      "on {}; the first steps' speed corrects it)",
      s < 60 ? fmt::format("{:.2g} s", s) : format_eta(s), steps, b.flops_per_step, b.matmul_flops / 1e9,
      device.str());
}

std::string step_cost_key(const config::TrainConfig& cfg) {
  const config::TrainConfig defaults;
  config::TrainConfig k = cfg;
  k.run_name = defaults.run_name;
  k.seed = defaults.seed;
  k.data.seed = defaults.data.seed;
  k.save_folder = defaults.save_folder;
  k.save_interval = defaults.save_interval;
  k.save_num_checkpoints_to_keep = defaults.save_num_checkpoints_to_keep;
  k.load_path = defaults.load_path;
  k.decay_from = defaults.decay_from;
  k.max_duration = defaults.max_duration;
  k.time_limit = defaults.time_limit;
  k.eval_interval = defaults.eval_interval;
  k.console_log_interval = defaults.console_log_interval;
  k.optimizer.learning_rate = defaults.optimizer.learning_rate;
  k.scheduler = defaults.scheduler;
  return config::to_yaml(k);
}

RunLength planned_length(const config::TrainConfig& cfg) {
  int64_t steps_per_epoch = 0;
  if (cfg.max_duration.unit() == config::Duration::Epochs)
    steps_per_epoch = data::train_dataset(config::data_section(cfg)).size() / cfg.global_train_batch_size;
  return run_length(cfg, steps_per_epoch);
}

double SweepCost::seconds() const {
  double total = 0;
  for (const auto& m : models) total += m.seconds_per_step * double(m.steps);
  return total;
}

SweepCost sweep_cost(const std::vector<config::TrainConfig>& configs, const std::vector<std::string>& names) {
  SweepCost cost;
  std::map<std::string, size_t> model_of;
  // As train sets the process up: without its malloc settings every step faults its buffers
  // in again, and the estimate of a small model came out 1.5x its runs' steps.
  configure_cpu_runtime();
  BenchOptions options;
  options.warmup = 2;
  options.steps = 3;
  options.rounds = 1;
  options.matmul_rate = false;
  for (size_t i = 0; i < configs.size(); ++i) {
    const auto [it, added] = model_of.emplace(step_cost_key(configs[i]), cost.models.size());
    if (added) {
      const auto bench = bench_topologies({{names[i], configs[i]}}, options);
      std::vector<double> seconds;
      for (const auto& s : bench.timings.at(0).steps) seconds.push_back(s.total());
      cost.models.push_back({names[i], median(seconds), 0, 0});
    }
    SweepCost::Model& m = cost.models[it->second];
    m.runs += 1;
    m.steps += planned_length(configs[i]).steps;
  }
  return cost;
}

}  // namespace siamese::train
