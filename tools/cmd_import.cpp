// `siamese import HF_DIR --out RUN_FOLDER`: a Hugging Face model folder as a siamese
// checkpoint (RUN_FOLDER/step0) to continue training or fine-tune from; export/hf_folder.h
// says which folders it reads.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <memory>

#include "commands.h"
#include "siamese/eval/run_tokenizer.h"
#include "siamese/export/hf_folder.h"
#include "siamese/train/checkpoint.h"

namespace siamese::cli {

namespace {

int run_import(const std::string& folder, const std::string& out) {
  auto imported = hf::import_model(folder);
  TrainConfig& cfg = imported.config;
  cfg.save_folder = out;
  if (std::filesystem::exists(std::filesystem::path(folder) / "tokenizer.json"))
    cfg.tokenizer.identifier =
        std::filesystem::absolute(std::filesystem::path(folder) / "tokenizer.json").string();
  const auto optim = train::build_optimizer(cfg.optimizer, imported.model->named_parameters());
  const auto step = train::save_checkpoint(out, *imported.model, *optim, train::TrainState{}, to_yaml(cfg));
  eval::keep_run_tokenizer(out, cfg);  // the run works once the HF folder is gone
  spdlog::info("imported {} ({}) into {}", folder, cfg.model.residual, step.string());
  return 0;
}

}  // namespace

void add_import_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("import", "Read a Hugging Face model folder into a checkpoint");
  auto folder = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("folder", *folder, "folder written by `siamese export`, or a LlamaForCausalLM folder")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--out", *out, "run folder to write step0 into")->required();
  cmd->callback([&run, folder, out] { run = [folder, out] { return run_import(*folder, *out); }; });
}

}  // namespace siamese::cli
