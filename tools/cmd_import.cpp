// `siamese import HF_DIR --out RUN_FOLDER`: a Hugging Face model folder as a siamese
// checkpoint (RUN_FOLDER/step0) to continue training or fine-tune from; export/hf_folder.h
// says which folders it reads.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/eval/run_tokenizer.h"
#include "siamese/export/hf_folder.h"
#include "siamese/export/hf_stock.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/console_log.h"
#include "siamese/train/cost_estimate.h"
#include "siamese/train/runtime.h"
#include "siamese/train/save_folder.h"

namespace siamese::cli {

namespace {

namespace fs = std::filesystem;

// What --out holds besides the lock file (the first few names): a folder in use is refused
// unless --overwrite.
std::vector<std::string> held_entries(const fs::path& out) {
  std::vector<std::string> held;
  if (!fs::is_directory(out)) return held;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename() != ".lock") held.push_back(e.path().filename().string());
  std::sort(held.begin(), held.end());
  if (held.size() > 5) {
    held.resize(5);
    held.push_back("...");
  }
  return held;
}

void refuse_used_out(const fs::path& out, bool overwrite) {
  if (overwrite) return;
  const auto held = held_entries(out);
  if (held.empty()) return;
  throw Error(
      fmt::format("--out is not empty ({}); the import would replace its step0", fmt::join(held, ", ")),
      out.string(), "import into a new or empty folder, or pass --overwrite to replace step0 there");
}

// An import keeps OLMo's training defaults, a full-scale batch and schedule: what a step of
// them costs here, said before anyone trains on them (a 3.5M-parameter model's 20 steps took
// 8 minutes on a 2-core CPU with no word before).
std::string training_cost_note(const config::TrainConfig& cfg) {
  const torch::Device device = train::resolve_device(cfg.device);
  const train::FlopsBound b = train::flops_bound(cfg, device);
  const double seconds = b.seconds_per_step;
  return fmt::format(
      "the checkpoint's config.yaml keeps OLMo's training defaults: global_train_batch_size {} x "
      "max_sequence_length {} = {:.3g} tokens a step, {:.3g} training FLOPs; max_duration {}, "
      "scheduler.t_warmup "
      "{:g}. At this machine's measured matmul rate ({:.3g} GFLOP/s on {}) a step takes at least {}{}",
      cfg.global_train_batch_size, cfg.model.max_sequence_length, b.tokens_per_step, b.flops_per_step,
      cfg.max_duration.text(), cfg.scheduler.t_warmup, b.matmul_flops / 1e9, device.str(),
      seconds < 60 ? fmt::format("{:.2g} s", seconds) : train::format_eta(seconds),
      seconds < 1 ? ""
                  : "; for a first run here pass a smaller --global_train_batch_size and "
                    "--device_train_microbatch_size (e.g. 8) and a shorter --max_duration");
}

int run_import(const std::string& folder, const std::string& out, bool overwrite) {
  // Checked before anything is read or created, so a refused import leaves no folder behind.
  refuse_used_out(out, overwrite);
  auto imported = hf::import_model(folder);
  config::TrainConfig& cfg = imported.config;
  cfg.save_folder = out;
  if (fs::exists(fs::path(folder) / "tokenizer.json"))
    cfg.tokenizer.identifier = fs::absolute(fs::path(folder) / "tokenizer.json").string();
  const auto optim = train::build_optimizer(cfg.optimizer, imported.model->named_parameters(), nullptr,
                                            &imported.model->shape());
  // The one writer of the folder, as a training run is; checked again under the lock, which a
  // run or another import may have taken since.
  const train::SaveFolderLock lock(out, "siamese import");
  refuse_used_out(out, overwrite);
  train::clean_save_folder(out, lock);
  // step0 appears whole or not at all: written beside it and renamed into place.
  const auto step =
      train::save_checkpoint(out, *imported.model, *optim, train::TrainState{}, config::to_yaml(cfg));
  eval::keep_run_tokenizer(out, cfg.data, cfg.tokenizer);  // the run works once the HF folder is gone
  spdlog::info("imported {} ({}) into {}", folder, cfg.model.residual, step.string());
  spdlog::info(training_cost_note(cfg));
  const auto checkpoints = train::checkpoint_folders(out);
  if (checkpoints.size() > 1)
    spdlog::warn(
        "{} also holds step{}: a run resuming from this folder starts there, not at step0 (pass "
        "load_path={} to start from the import)",
        out, checkpoints.back().first, step.string());
  return 0;
}

}  // namespace

void add_import_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("import", "Read a Hugging Face model folder into a checkpoint");
  auto folder = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("folder", *folder,
                  "folder written by `siamese export`, or a stock " + hf::stock_class_list() + " folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto overwrite = std::make_shared<bool>(false);
  cmd->add_option("--out", *out, "run folder to write step0 into (new or empty)")->required();
  cmd->add_flag("--overwrite", *overwrite, "replace step0 in an --out that is not empty");
  cmd->callback([&run, folder, out, overwrite] {
    run = [folder, out, overwrite] { return run_import(*folder, *out, *overwrite); };
  });
}

}  // namespace siamese::cli
