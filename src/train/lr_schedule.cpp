#include "siamese/train/lr_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "siamese/config/sections.h"

namespace siamese::train {

namespace {

// OLMo's Scheduler._linear_warmup: from warmup_min_lr (default 10% of the peak) up to the
// peak over t_warmup.
double linear_warmup(const config::SchedulerConfig& cfg, double initial_lr, double t) {
  const double min_lr = cfg.warmup_min_lr.value_or(initial_lr * 0.10);
  return min_lr + (initial_lr - min_lr) * std::min(t, cfg.t_warmup) / cfg.t_warmup;
}

// WSD's decay at `progress` 0..1 of it, from 1 to 0.
double decay_curve(config::DecayShape shape, double progress) {
  switch (shape) {
    case config::DecayShape::Cosine:
      return (1 + std::cos(M_PI * progress)) / 2;
    case config::DecayShape::OneMinusSqrt:
      return 1 - std::sqrt(progress);
    case config::DecayShape::Linear:
      break;
  }
  return 1 - progress;
}

}  // namespace

RunLength run_length(const config::TrainConfig& cfg, int64_t steps_per_epoch) {
  const config::Duration& d = cfg.max_duration;
  const int64_t tokens_per_step = cfg.global_train_batch_size * cfg.model.max_sequence_length;
  RunLength r;
  r.steps = config::run_steps(cfg, steps_per_epoch);
  r.token_units = cfg.scheduler.units == config::ScheduleUnits::Tokens;
  r.schedule_max = !r.token_units                         ? double(r.steps)
                   : d.unit() == config::Duration::Tokens ? double(d.value())
                                                          : double(r.steps) * double(tokens_per_step);
  return r;
}

std::string short_of_peak(const config::SchedulerConfig& cfg, double initial_lr, double t_end) {
  if (cfg.name == config::SchedulerName::Constant || t_end >= cfg.t_warmup) return "";
  const double reached = learning_rate(cfg, initial_lr, t_end, t_end);
  return fmt::format(
      "the run ends at {:g} {}, inside scheduler.t_warmup {:g}: its learning rate rises to {:.3g}, {:.0f}% "
      "of "
      "optimizer.learning_rate {:g}, and never trains at it; lengthen max_duration past t_warmup, or shorten "
      "scheduler.t_warmup",
      t_end, config::name_of(cfg.units), cfg.t_warmup, reached, 100.0 * reached / initial_lr, initial_lr);
}

double wsd_decay_length(const config::SchedulerConfig& cfg, double t_max) {
  return cfg.t_decay ? *cfg.t_decay : std::nearbyint(t_max * cfg.decay_fraction.value_or(0.1));
}

double learning_rate(const config::SchedulerConfig& cfg, double initial_lr, double t, double t_max_default) {
  const double t_max = cfg.t_max.value_or(t_max_default);
  const double eta_min = initial_lr * cfg.alpha_f;
  if (cfg.name == config::SchedulerName::Constant) return initial_lr;
  if (t < cfg.t_warmup) return linear_warmup(cfg, initial_lr, t);
  if (cfg.name == config::SchedulerName::ConstantWithWarmup) return initial_lr;
  if (cfg.name == config::SchedulerName::InverseSqrtWithWarmup)
    return initial_lr * std::sqrt(cfg.t_warmup / std::max(cfg.t_warmup, t));
  if (t >= t_max) return eta_min;
  if (cfg.name == config::SchedulerName::Wsd) {
    const double decay = wsd_decay_length(cfg, t_max);
    if (t < t_max - decay) return initial_lr;
    return eta_min + (initial_lr - eta_min) * decay_curve(cfg.decay_shape, (t - (t_max - decay)) / decay);
  }
  const double progress = (t - cfg.t_warmup) / (t_max - cfg.t_warmup);
  if (cfg.name == config::SchedulerName::CosineWithWarmup)
    return eta_min + (initial_lr - eta_min) * (1 + std::cos(M_PI * progress)) / 2;
  return initial_lr - (initial_lr - eta_min) * progress;  // linear_with_warmup
}

}  // namespace siamese::train
