// `siamese export CHECKPOINT --out DIR`: a Hugging Face model folder from a checkpoint or a
// run folder (its newest checkpoint); export/hf_folder.h says what is written and how.
#include <spdlog/spdlog.h>

#include <memory>

#include "commands.h"
#include "siamese/eval/run_tokenizer.h"
#include "siamese/export/hf_folder.h"
#include "siamese/tokenizer/tokenizer.h"
#include "siamese/train/checkpoint_model.h"

namespace siamese::cli {

namespace {

struct ExportArgs {
  std::string checkpoint, out, tokenizer;
  hf::ExportOptions options;
};

int run_export(const ExportArgs& a) {
  auto ck = train::load_checkpoint_model(a.checkpoint, torch::kCPU);
  hf::ExportOptions options = a.options;
  options.tokenizer = eval::run_tokenizer_path(ck.config.data, ck.config.tokenizer,
                                               (ck.dir / "config.yaml").string(), a.tokenizer);
  // A tokenizer that does not load would be shipped as it is, to fail only in transformers;
  // a --tokenizer given for a run that ships none is a mistake as well.
  if (const std::string& given = options.tokenizer.empty() ? a.tokenizer : options.tokenizer; !given.empty())
    tokenizer::Tokenizer::from_file(given);
  const std::string architecture = hf::export_model(ck.config, *ck.model, a.out, options);
  spdlog::info("exported {} (step {}, {}) to {} as {}", ck.dir.string(), ck.step, ck.config.model.residual,
               a.out, architecture);
  return 0;
}

}  // namespace

void add_export_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("export", "Write a checkpoint as a Hugging Face model folder");
  auto a = std::make_shared<ExportArgs>();
  cmd->add_option("checkpoint", a->checkpoint, "step<N> folder or run folder (its newest checkpoint)")
      ->required();
  cmd->add_option("--out", a->out, "output folder (new, empty, or an earlier export: replaced whole)")
      ->required();
  cmd->add_option("--max-shard-bytes", a->options.max_shard_bytes, "split model.safetensors above this size")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.json to ship (default: the run's tokenizer.identifier)");
  cmd->callback([&run, a] { run = [a] { return run_export(*a); }; });
}

}  // namespace siamese::cli
