// `siamese eval CHECKPOINT --tasks ...`: OLMo's zero-shot downstream tasks on a checkpoint
// (src/eval/downstream.cpp); results as JSON and as metrics.jsonl lines under OLMo's keys.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint_model.h"
#include "commands.h"
#include "siamese/eval/downstream.h"
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
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int run_eval(const EvalArgs& a) {
  train::configure_cpu_runtime();
  const torch::Device device = train::resolve_device(a.device);
  auto ck = load_checkpoint_model(a.checkpoint, device);
  const std::string tok_path = a.tokenizer.empty() ? ck.config.tokenizer.identifier : a.tokenizer;
  if (!std::filesystem::exists(tok_path))
    throw Error(fmt::format("tokenizer file \"{}\" not found", tok_path),
                (ck.dir / "config.yaml").string() + " (tokenizer.identifier)",
                "pass --tokenizer PATH/tokenizer.json");
  const auto tok = tokenizer::Tokenizer::from_file(tok_path);
  const std::string data_dir = a.data_dir.empty() ? shared_dir() + "/evals" : a.data_dir;
  const auto names = a.tasks.empty() ? eval::task_names() : split_list(a.tasks);

  eval::DownstreamOptions opt;
  opt.batch_size = a.batch_size;
  opt.device = device;
  if (!a.metric.empty()) opt.metric = eval::parse_metric(a.metric);

  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  nlohmann::ordered_json metrics = nlohmann::ordered_json::object();
  std::vector<std::string> lines;
  double sum = 0;
  for (const auto& name : names) {
    const auto task = eval::load_task(name, data_dir, a.limit);
    const auto r = eval::run_downstream(*ck.model, tok, task, opt);
    spdlog::info("{}: {} = {:.4f} ({} documents)", name, r.metric_key(), r.accuracy, r.documents);
    results.push_back({{"task", r.task}, {"label", r.label}, {"metric", eval::metric_name(r.metric)},
                       {"key", r.metric_key()}, {"accuracy", r.accuracy}, {"documents", r.documents}});
    metrics[r.metric_key()] = r.accuracy;
    lines.push_back(r.to_json(ck.step));
    sum += r.accuracy;
  }
  const double average = sum / double(names.size());
  std::cout << fmt::format("{:<18} {:<10} {:>9} {:>6}\n", "task", "metric", "accuracy", "docs");
  for (const auto& r : results)
    std::cout << fmt::format("{:<18} {:<10} {:>9.4f} {:>6}\n", r["task"].get<std::string>(),
                             r["metric"].get<std::string>(), r["accuracy"].get<double>(),
                             r["documents"].get<int64_t>());
  std::cout << fmt::format("{:<18} {:<10} {:>9.4f}\n", "average", "", average);

  nlohmann::ordered_json doc = {{"checkpoint", ck.dir.string()}, {"step", ck.step},
                                {"topology", ck.config.model.residual}, {"limit", a.limit},
                                {"results", results}, {"metrics", metrics}, {"average", average}};
  if (!a.out.empty()) {
    std::ofstream(a.out) << doc.dump(2) << "\n";
    spdlog::info("wrote {}", a.out);
  }
  if (!a.no_metrics) {
    const std::string path =
        a.metrics.empty() ? (ck.dir.parent_path() / "metrics.jsonl").string() : a.metrics;
    std::ofstream m(path, std::ios::app);
    if (!m) throw Error("cannot append to metrics file", path, "pass --metrics FILE or --no-metrics");
    for (const auto& l : lines) m << l << "\n";
    spdlog::info("appended {} lines to {}", lines.size(), path);
  }
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "Zero-shot downstream evaluation (OLMo's MC tasks)");
  cmd->add_option("checkpoint", args->checkpoint, "step<N> folder or run folder")->required();
  cmd->add_option("--tasks", args->tasks, "comma-separated task names (default: all)");
  cmd->add_option("--data-dir", args->data_dir, "folder with <task>.jsonl (default: shared/evals)");
  cmd->add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: the config's)");
  cmd->add_option("--limit", args->limit, "first N documents of each task");
  cmd->add_option("--batch-size", args->batch_size, "sequences per forward pass")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--metric", args->metric, "acc | len_norm | pmi_dc (default: OLMo's per task)");
  cmd->add_option("--out", args->out, "results JSON");
  cmd->add_option("--metrics", args->metrics, "metrics.jsonl to append to (default: the run's)");
  cmd->add_flag("--no-metrics", args->no_metrics, "do not append to a metrics.jsonl");
  cmd->add_option("--device", args->device, "auto | cpu | cuda");
  cmd->callback([&run, args] { run = [args] { return run_eval(*args); }; });
}

}  // namespace siamese::cli
