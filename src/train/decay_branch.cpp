#include "siamese/train/decay_branch.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "siamese/common/error.h"
#include "siamese/config/duration.h"
#include "siamese/config/load.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/lr_schedule.h"
#include "siamese/train/save_folder.h"

namespace fs = std::filesystem;

namespace siamese::train {

namespace {

// The parent's position in the scheduler's units, from train_state.json.
double parent_position(const fs::path& checkpoint, config::ScheduleUnits units) {
  std::ifstream in(checkpoint / "train_state.json");
  const auto state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded() || !state.contains("step") || !state.contains("tokens"))
    throw Error("train_state.json has no step and tokens", (checkpoint / "train_state.json").string(),
                "branch from a checkpoint that siamese train wrote");
  return units == config::ScheduleUnits::Tokens ? state["tokens"].get<double>() : state["step"].get<double>();
}

// The parent run's length in its scheduler's units (its t_max, else its max_duration).
double parent_t_max(const config::SchedulerConfig& scheduler, const config::Duration& d) {
  if (scheduler.t_max) return *scheduler.t_max;
  const bool tokens = scheduler.units == config::ScheduleUnits::Tokens;
  if (d.unit() == config::Duration::Tokens && tokens) return double(d.value());
  if (d.unit() == config::Duration::Steps && !tokens) return double(d.value());
  throw Error("the parent's max_duration " + d.text() + " is not in its scheduler's units", "scheduler.t_max",
              "branch from a run whose t_max or max_duration is in scheduler.units");
}

}  // namespace

config::TrainConfig decay_branch(const config::TrainConfig& cfg) {
  const fs::path from = cfg.decay_from;
  if (const auto problem = checkpoint_problem(from))
    throw Error("decay_from " + from.string() + " is not an intact checkpoint: " + *problem, "decay_from",
                "name a checkpoint folder of the stable run, RUN/stepN");
  const config::SchedulerConfig& s = cfg.scheduler;
  if (s.name != config::SchedulerName::Wsd || !s.t_decay || *s.t_decay <= 0)
    throw Error("a decay branch trains the decay of a wsd schedule, and this config's is " +
                    config::name_of(s.name) + (s.t_decay ? "" : " without scheduler.t_decay"),
                "scheduler.t_decay",
                "set scheduler.name: wsd and scheduler.t_decay to the branch's decay length");
  const config::TrainConfig parent = config::load_config((from / "config.yaml").string(), {});
  const double at = parent_position(from, s.units);
  const double peak = parent.optimizer.learning_rate;
  const double lr =
      learning_rate(parent.scheduler, peak, at, parent_t_max(parent.scheduler, parent.max_duration));
  if (std::abs(lr - peak) > 1e-12 * peak)
    throw Error(
        fmt::format("{} is at {} {} of its run, where its learning rate is {:.4g}, not the peak {:.4g}: "
                    "it is not in the stable phase",
                    from.string(), at, config::name_of(s.units), lr, peak),
        "decay_from", "branch from a checkpoint after the warmup and before the parent's own decay");
  config::TrainConfig branch = cfg;
  const int64_t end = std::llround(at + *s.t_decay);
  branch.max_duration =
      s.units == config::ScheduleUnits::Tokens ? fmt::format("{}T", end) : std::to_string(end);
  branch.scheduler.t_max.reset();
  branch.scheduler.decay_fraction.reset();
  const fs::path parent_folder = from.parent_path();
  if (branch.save_folder.empty() ||
      fs::weakly_canonical(branch.save_folder) == fs::weakly_canonical(parent_folder))
    branch.save_folder =
        (parent_folder.parent_path() / fmt::format("{}_decay{}+{}", parent_folder.filename().string(),
                                                   std::llround(at), std::llround(*s.t_decay)))
            .string();
  // A branch that has checkpoints of its own resumes from them, not from the parent again.
  branch.load_path = latest_checkpoint(branch.save_folder) ? "" : from.string();
  return branch;
}

}  // namespace siamese::train
