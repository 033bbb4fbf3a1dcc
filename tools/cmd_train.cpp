// `siamese train CONFIG [--dotted.key=value ...]`: OLMo-style pretraining (src/train/trainer.cpp).
#include <memory>
#include <optional>

#include "commands.h"
#include "siamese/config/validate.h"
#include "siamese/dist/world.h"
#include "siamese/train/decay_branch.h"
#include "siamese/train/parallelize.h"
#include "siamese/train/trainer.h"

namespace siamese::cli {

void add_train_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("train", "Train a model; resumes from save_folder's newest checkpoint");
  auto args = std::make_shared<ConfigArgs>();
  auto stop_at = std::make_shared<int64_t>(-1);
  cmd->add_option("--stop-at", *stop_at,
                  "Stop after this step with a checkpoint, as if preempted (the run resumes later)")
      ->check(CLI::PositiveNumber);
  add_config_args(cmd, *args);
  cmd->footer(
      "Where the run goes: the config's save_folder (configs/tiny: runs/<run_name>), with its\n"
      "checkpoints, metrics.jsonl and TensorBoard events; a folder with checkpoints is resumed.\n"
      "MODEL_TYPE (environment) picks the topology, model.residual, as in the official code;\n"
      "an override (--model.residual=...) beats it. Every key with its default and range:\n"
      "docs/configuration.md or `siamese config --schema`. Several processes: launch under\n"
      "scripts/torchrun or srun (docs/distributed.md).");
  cmd->callback([&run, args, stop_at] {
    run = [args, stop_at] {
      config::TrainConfig cfg = load_run_config(*args);
      if (!cfg.decay_from.empty()) cfg = train::decay_branch(cfg);
      train::RunControl control;
      control.stop_at = *stop_at;
      // Launched by torchrun or srun: data parallel over a process group, as the config says.
      const dist::World world = dist::detect_world();
      std::optional<dist::ParallelPlan> plan;
      if (world.distributed()) {
        config::validate_for_world_size(cfg, world.size);
        plan = train::make_plan(cfg, world);
        control.plan = &*plan;
      }
      return train::train(cfg, control);
    };
  });
}

}  // namespace siamese::cli
