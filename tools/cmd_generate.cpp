// `siamese generate CHECKPOINT --prompt TEXT`: text from a checkpoint (src/eval/generate.cpp),
// printed as it is produced. `--bench` times greedy decoding with and without the KV cache
// on the same prompts in the same process.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/eval/generate.h"
#include "siamese/eval/text_codec.h"
#include "siamese/train/checkpoint_model.h"
#include "siamese/train/runtime.h"

namespace siamese::cli {

namespace {

struct GenerateArgs {
  std::string checkpoint;
  std::vector<std::string> prompts;
  std::string prompt_file;
  std::string tokenizer;
  std::string device = "auto";
  eval::Sampling sampling;
  bool max_tokens_given = false;  // else up to the default, as far as the model's context allows
  int64_t eos = -1;               // -1: the config's
  bool no_cache = false;
  bool bench = false;
};

// Prints the text of the generated ids as they come: only the part that no later token can
// change (a multi-byte character split across tokens waits for its last byte).
class StreamPrinter {
 public:
  explicit StreamPrinter(const eval::TextCodec& codec) : codec_(codec) {}
  void add(int64_t id) {
    ids_.push_back(id);
    const std::string text = codec_.decode(ids_);
    size_t ready = text.size();
    if (!codec_.byte_level() && text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0)
      ready -= 3;  // U+FFFD: an incomplete character so far
    if (ready > printed_) {
      std::cout << text.substr(printed_, ready - printed_) << std::flush;
      printed_ = ready;
    }
  }
  void finish() {
    const std::string text = codec_.decode(ids_);
    if (text.size() > printed_) std::cout << text.substr(printed_);
    std::cout << "\n" << std::flush;
  }

 private:
  const eval::TextCodec& codec_;
  std::vector<int64_t> ids_;
  size_t printed_ = 0;
};

std::vector<std::string> read_prompts(const GenerateArgs& a) {
  std::vector<std::string> prompts = a.prompts;
  if (!a.prompt_file.empty()) {
    if (std::filesystem::is_directory(a.prompt_file))
      throw Error("the prompt file is a folder", a.prompt_file, "pass a text file with one prompt per line");
    std::ifstream in(a.prompt_file);
    if (!in) throw Error("cannot read the prompt file", a.prompt_file, "check the path");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty())
    throw Error("no prompt given", "siamese generate", "pass --prompt TEXT or --prompt-file FILE");
  return prompts;
}

// Greedy tokens/s with and without the cache, alternating so that load changes hit both.
int run_bench(train::CheckpointModel& ck, const std::vector<std::vector<int64_t>>& prompts,
              eval::Sampling s) {
  s.temperature = 0.0;
  s.eos.reset();  // both runs produce exactly max_tokens
  double seconds[2] = {0, 0};
  int64_t tokens = 0;
  bool same = true;
  for (int round = 0; round < 2; ++round) {
    for (const auto& p : prompts) {
      std::vector<int64_t> out[2];
      for (int cached = 0; cached < 2; ++cached) {
        s.use_cache = cached == 1;
        const auto t0 = std::chrono::steady_clock::now();
        out[cached] = eval::generate(*ck.model, p, s);
        seconds[cached] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
      same = same && out[0] == out[1];
      tokens += int64_t(out[1].size());
    }
  }
  const double with = double(tokens) / seconds[1], without = double(tokens) / seconds[0];
  std::cout << fmt::format("prompt tokens {}, generated per prompt {}, prompts {} (x2 rounds)\n",
                           prompts.front().size(), s.max_tokens, prompts.size());
  std::cout << fmt::format("tokens/s with KV cache:    {:.1f}\n", with);
  std::cout << fmt::format("tokens/s without KV cache: {:.1f}\n", without);
  std::cout << fmt::format("speed-up {:.2f}x, same tokens: {}\n", with / without, same ? "yes" : "no");
  return same ? 0 : 1;
}

int run_generate(const GenerateArgs& a) {
  train::configure_cpu_runtime();
  auto ck = train::load_checkpoint_model(a.checkpoint, train::resolve_device(a.device));
  const eval::TextCodec codec(ck.config.data, ck.config.tokenizer, (ck.dir / "config.yaml").string(),
                              a.tokenizer);
  eval::Sampling s = a.sampling;
  s.use_cache = !a.no_cache;
  if (a.eos >= 0)
    s.eos = a.eos;
  else if (ck.config.model.eos_token_id < ck.config.model.vocab_size)
    s.eos = ck.config.model.eos_token_id;

  std::vector<std::vector<int64_t>> prompts;
  for (const auto& p : read_prompts(a)) prompts.push_back(codec.encode(p));
  if (a.bench) return run_bench(ck, prompts, s);
  const int64_t context = ck.config.model.max_sequence_length;
  for (const auto& p : prompts) {
    eval::Sampling each = s;
    if (!a.max_tokens_given) each.max_tokens = std::min(s.max_tokens, context - int64_t(p.size()));
    if (each.max_tokens < 1)
      throw Error(fmt::format("the prompt is {} tokens, the model's context (max_sequence_length) {}",
                              p.size(), context),
                  "siamese generate", "shorten the prompt");
    // eval::generate checks the lengths before the first token: the prompt is echoed only then,
    // so that an error does not follow half a line.
    bool echoed = false;
    auto echo = [&] {
      if (!echoed) std::cout << codec.decode(p) << std::flush;
      echoed = true;
    };
    StreamPrinter printer(codec);
    eval::generate(*ck.model, p, each, [&](int64_t id) {
      echo();
      if (!(each.eos && id == *each.eos)) printer.add(id);
    });
    echo();
    printer.finish();
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, Handler& run) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate text from a checkpoint (greedy or sampled, KV cache)");
  cmd->add_option("checkpoint", a->checkpoint, "step<N> folder or run folder (its newest checkpoint)")
      ->required();
  cmd->add_option("--prompt", a->prompts, "prompt text (repeatable)");
  cmd->add_option("--prompt-file", a->prompt_file, "file with one prompt per line");
  auto* max_tokens = cmd->add_option("--max-tokens", a->sampling.max_tokens,
                                     "tokens to generate at most (default: 64, or what the model's context "
                                     "leaves after the prompt)")
                         ->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", a->sampling.temperature, "0 = greedy, else in [1e-3, 1e3]")
      ->check(
          number_in([](double t) { return t == 0 || (t >= 1e-3 && t <= 1e3); }, "0 (greedy) or [1e-3, 1e3]"));
  cmd->add_option("--top-k", a->sampling.top_k, "sample from the k most likely tokens (0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", a->sampling.top_p, "nucleus sampling mass, in (0, 1]")
      ->check(number_in([](double p) { return p > 0 && p <= 1; }, "(0, 1]: a mass of 0 keeps no token"));
  cmd->add_option("--seed", a->sampling.seed, "sampling seed");
  cmd->add_option("--eos", a->eos,
                  "stop token id (default: the config's eos_token_id when in the vocabulary)");
  cmd->add_option("--tokenizer", a->tokenizer, "tokenizer.json (default: the config's)");
  cmd->add_option("--device", a->device, "auto | cpu | cuda");
  cmd->add_flag("--no-cache", a->no_cache, "re-read the whole sequence for every token");
  cmd->add_flag("--bench", a->bench, "print greedy tokens/s with and without the KV cache");
  cmd->callback([&run, a, max_tokens] {
    a->max_tokens_given = max_tokens->count() > 0;
    run = [a] { return run_generate(*a); };
  });
}

}  // namespace siamese::cli
