// `siamese eval CHECKPOINT --tasks ...`: OLMo's zero-shot downstream tasks on a checkpoint
// (src/eval/downstream.cpp); results as JSON and as metrics.jsonl lines under OLMo's keys.
// `siamese eval CHECKPOINT --text FILE...`: perplexity and bits per byte of text files
// (src/eval/perplexity.cpp), documents per file or per line.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "commands.h"
#include "progress_bar.h"
#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/common/json_line.h"
#include "siamese/common/shared_dir.h"
#include "siamese/eval/downstream.h"
#include "siamese/eval/perplexity.h"
#include "siamese/eval/run_tokenizer.h"
#include "siamese/eval/text_codec.h"
#include "siamese/train/checkpoint_model.h"
#include "siamese/train/runtime.h"

namespace siamese::cli {

namespace {

struct EvalArgs {
  std::string checkpoint;
  std::string tasks;
  std::string data_dir;
  std::string tokenizer;
  std::string metric;
  std::string out;
  std::string metrics;
  std::string device = "auto";
  int64_t limit = -1;
  int64_t batch_size = 16;
  bool no_metrics = false;
  bool no_shared_contexts = false;
  std::vector<std::string> text;
  bool doc_per_line = false;
  int64_t window = 0;
  int64_t stride = 0;
};

std::vector<eval::TextDocument> read_documents(const EvalArgs& a, const eval::TextCodec& codec) {
  std::vector<eval::TextDocument> docs;
  for (const auto& path : a.text) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw Error("--text names a folder, not a text file", path, "pass the text files in it");
    std::ifstream in(path, std::ios::binary);
    if (!in)
      throw Error(std::string("cannot read the text file: ") + std::strerror(errno), path, "check the path");
    std::stringstream whole;
    if (!(whole << in.rdbuf()) && in.bad())
      throw Error(std::string("cannot read the text file: ") + std::strerror(errno), path, "check the path");
    const std::string text = whole.str();
    auto add = [&](const std::string& t, int64_t offset, int64_t line) {
      if (!t.empty()) docs.push_back({codec.encode(t, path, offset, line), int64_t(t.size())});
    };
    if (!a.doc_per_line) {
      add(text, 0, 1);
      continue;
    }
    int64_t line = 1;
    for (size_t start = 0; start < text.size(); ++line) {
      const size_t end = std::min(text.find('\n', start), text.size());
      add(text.substr(start, end - start), int64_t(start), line);
      start = end + 1;
    }
  }
  if (docs.empty())
    throw Error("no text to score", fmt::format("{}", fmt::join(a.text, ", ")), "pass non-empty files");
  return docs;
}

int run_text_eval(const EvalArgs& a) {
  train::configure_cpu_runtime();
  auto ck = train::load_checkpoint_model(a.checkpoint, train::resolve_device(a.device));
  const eval::TextCodec codec(ck.config.data, ck.config.tokenizer, (ck.dir / "config.yaml").string(),
                              a.tokenizer);
  const auto docs = read_documents(a, codec);
  eval::TextOptions o;
  o.window = a.window;
  o.stride = a.stride;
  if (ck.config.model.eos_token_id < ck.config.model.vocab_size) o.bos = ck.config.model.eos_token_id;
  // Counted in scored tokens (each document's first token is scored only after a BOS), so
  // that one long document shows progress as well as many short ones.
  int64_t scored = 0;
  for (const auto& d : docs) scored += int64_t(d.ids.size()) - (o.bos ? 0 : 1);
  ProgressBar bar("text", scored, "tokens");
  o.progress = [&](int64_t d, int64_t t) {
    bar.update(t, fmt::format(", {} of {} documents", d, docs.size()));
  };
  const auto s = eval::score_text(*ck.model, docs, o);
  std::cout << fmt::format("{:<10} {:>8} {:>10} {:>10} {:>8} {:>11} {:>13}\n", "", "documents", "tokens",
                           "bytes", "loss", "perplexity", "bits/byte");
  std::cout << fmt::format("{:<10} {:>8} {:>10} {:>10} {:>8.4f} {:>11.4f} {:>13.4f}\n", "text", s.documents,
                           s.tokens, s.bytes, s.loss(), s.perplexity(), s.bits_per_byte());
  if (!a.out.empty()) {
    const nlohmann::ordered_json doc = {{"checkpoint", ck.dir.string()},
                                        {"step", ck.step},
                                        {"topology", ck.config.model.residual},
                                        {"files", a.text},
                                        {"documents", s.documents},
                                        {"tokens", s.tokens},
                                        {"bytes", s.bytes},
                                        {"loss", s.loss()},
                                        {"perplexity", s.perplexity()},
                                        {"bits_per_byte", s.bits_per_byte()}};
    write_output(a.out, doc.dump(2) + "\n");
  }
  return 0;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int run_eval(const EvalArgs& a) {
  if (!a.text.empty()) return run_text_eval(a);
  const auto names = a.tasks.empty() ? eval::task_names() : split_list(a.tasks);
  if (names.empty())
    throw Error("--tasks \"" + a.tasks + "\" names no task", "--tasks",
                "name tasks separated by commas, e.g. --tasks arc_easy,piqa, or leave --tasks out for all");
  train::configure_cpu_runtime();
  const torch::Device device = train::resolve_device(a.device);
  auto ck = train::load_checkpoint_model(a.checkpoint, device);
  // A run trained on the built-in byte corpus may still name a tokenizer (quickstart's); one
  // that names none has nothing to fall back to, and "pass --tokenizer" would hand the model
  // ids it never saw. An explicit --tokenizer goes on to the vocabulary check.
  const auto tok = [&] {
    try {
      return eval::load_run_tokenizer(ck.config.tokenizer, (ck.dir / "config.yaml").string(), a.tokenizer);
    } catch (const Error&) {
      if (eval::uses_tokenizer(ck.config.data) || !a.tokenizer.empty()) throw;
      throw Error(
          "the run was trained on the bytes of a built-in corpus (data.synthetic) and names no tokenizer "
          "it can find, and downstream tasks are scored in the tokens a run was trained on",
          (ck.dir / "config.yaml").string() + " (data.synthetic, tokenizer.identifier)",
          "score a byte-level run on text with `siamese eval " + a.checkpoint +
              " --text FILE`, or train with a tokenizer to run --tasks");
    }
  }();
  const std::string data_dir = a.data_dir.empty() ? shared_dir() + "/evals" : a.data_dir;

  eval::DownstreamOptions opt;
  opt.batch_size = a.batch_size;
  opt.device = device;
  if (!a.metric.empty()) opt.metric = eval::parse_metric(a.metric);
  opt.share_contexts = !a.no_shared_contexts;

  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
  std::vector<std::string> lines;
  double sum = 0;
  for (const auto& name : names) {
    const auto task = eval::load_task(name, data_dir, a.limit);
    std::optional<ProgressBar> bar;
    opt.progress = [&](int64_t done, int64_t total) {
      if (!bar) bar.emplace(name, total, "requests");
      bar->update(done);
    };
    const auto start = std::chrono::steady_clock::now();
    const auto r = eval::run_downstream(*ck.model, tok, task, opt);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("{}: {} = {:.4f} ({} documents, {:.1f} documents/s)", name, r.metric_key(), r.accuracy,
                 r.documents, double(r.documents) / std::max(secs, 1e-9));
    results.push_back({{"task", r.task},
                       {"label", r.label},
                       {"metric", eval::metric_name(r.metric)},
                       {"key", r.metric_key()},
                       {"accuracy", r.accuracy},
                       {"documents", r.documents}});
    metrics[r.metric_key()] = r.accuracy;
    MetricsRow row = r.to_row(ck.step);
    if (a.limit > 0) row[metric::kEvalLimit] = a.limit;  // not the full task: `siamese report` marks it
    lines.push_back(json_line(row));
    sum += r.accuracy;
  }
  const double average = sum / double(names.size());
  std::cout << fmt::format("{:<18} {:<10} {:>9} {:>6}\n", "task", "metric", "accuracy", "docs");
  for (const auto& r : results)
    std::cout << fmt::format("{:<18} {:<10} {:>9.4f} {:>6}\n", r["task"].get<std::string>(),
                             r["metric"].get<std::string>(), r["accuracy"].get<double>(),
                             r["documents"].get<int64_t>());
  std::cout << fmt::format("{:<18} {:<10} {:>9.4f}\n", "average", "", average);

  nlohmann::ordered_json doc = {{"checkpoint", ck.dir.string()},
                                {"step", ck.step},
                                {"topology", ck.config.model.residual},
                                {"limit", a.limit},
                                {"results", results},
                                {"metrics", metrics},
                                {"average", average}};
  if (!a.out.empty()) {
    write_output(a.out, doc.dump(2) + "\n");
  }
  if (!a.no_metrics) {
    const std::string path =
        a.metrics.empty() ? (ck.dir.parent_path() / "metrics.jsonl").string() : a.metrics;
    FileSink m(path, "free disk space, or pass --metrics FILE or --no-metrics", FileSink::Mode::Append);
    for (const auto& l : lines) m.write(l + "\n");
    m.close();
    spdlog::info("appended {} lines to {}", lines.size(), path);
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<EvalArgs>();
  auto* cmd =
      app.add_subcommand("eval", "Zero-shot downstream evaluation (OLMo's MC tasks), or perplexity of text");
  cmd->add_option("checkpoint", args->checkpoint, "step<N> folder or run folder")->required();
  cmd->add_option("--tasks", args->tasks, "comma-separated task names (default: all)");
  cmd->add_option("--data-dir", args->data_dir, "folder with <task>.jsonl (default: shared/evals)");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: the config's)");
  cmd->add_option("--limit", args->limit, "first N documents of each task")->check(CLI::PositiveNumber);
  cmd->add_option("--batch-size", args->batch_size, "sequences per forward pass")->check(CLI::PositiveNumber);
  cmd->add_option("--metric", args->metric, "acc | len_norm | pmi_dc (default: OLMo's per task)")
      ->check(CLI::IsMember({"acc", "len_norm", "pmi_dc"}));
  cmd->add_option("--out", args->out, "results JSON");
  cmd->add_option("--metrics", args->metrics, "metrics.jsonl to append to (default: the run's)");
  cmd->add_flag("--no-metrics", args->no_metrics, "do not append to a metrics.jsonl");
  cmd->add_flag("--no-shared-contexts", args->no_shared_contexts,
                "read every answer option whole instead of its question's context once (to compare)");
  cmd->add_option("--device", args->device, "auto | cpu | cuda");
  cmd->add_option("--text", args->text, "text files: perplexity and bits per byte instead of tasks");
  cmd->add_flag("--doc-per-line", args->doc_per_line,
                "--text: each non-empty line is a document (default: each file)");
  cmd->add_option("--window", args->window, "--text: tokens per window (default: max_sequence_length)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--stride", args->stride, "--text: tokens between window starts (default: window / 2)")
      ->check(CLI::PositiveNumber);
  cmd->callback([&run, args] { run = [args] { return run_eval(*args); }; });
}

}  // namespace siamese::cli
