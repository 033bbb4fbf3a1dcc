// `siamese analyze CHECKPOINT --data TOKENS`: the paper's per-stream measurements of a
// checkpoint (src/analysis/): magnitudes by depth, stream mixing from norm scales, the
// learned mixing weights over depth (mHC, AttnRes), logit lens per stream and effective depth, as one JSON
// document for scripts/plot_analysis.py.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "siamese/analysis/depth_mixing.h"
#include "siamese/analysis/effective_depth.h"
#include "siamese/analysis/logit_lens.h"
#include "siamese/analysis/magnitude.h"
#include "siamese/analysis/stream_mixing.h"
#include "siamese/analysis/stream_stats.h"
#include "siamese/data/token_dataset.h"
#include "siamese/train/checkpoint_model.h"
#include "siamese/train/runtime.h"
#include "siamese/train/stream_stats_log.h"

namespace siamese::cli {

namespace {

// A tensor of any rank as nested JSON arrays.
nlohmann::ordered_json nested(const torch::Tensor& t) {
  if (t.dim() == 0) return t.item<double>();
  auto a = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < t.size(0); ++i) a.push_back(nested(t[i]));
  return a;
}

struct AnalyzeArgs {
  std::string checkpoint;
  std::vector<std::string> data;
  std::string dtype;
  std::string out = "analysis.json";
  std::string device = "auto";
  int64_t batches = 4;
  int64_t batch_size = 4;
};

int run_analyze(const AnalyzeArgs& a) {
  train::configure_cpu_runtime();
  const torch::Device device = train::resolve_device(a.device);
  auto ck = train::load_checkpoint_model(a.checkpoint, device);
  const auto& mc = ck.config.model;
  // CLI11 has checked --dtype against the spellings.
  const config::TokenDtype dtype =
      a.dtype.empty() ? ck.config.data.memmap_dtype : *config::enum_named<config::TokenDtype>(a.dtype);
  data::TokenDataset ds(a.data, dtype, mc.max_sequence_length, mc.embedding_size);
  // Instances spread evenly over the files, the same ones for every checkpoint.
  const auto sample = data::spread_sample(ds, a.batches * a.batch_size).to(device);
  const int64_t wanted = sample.size(0);
  const std::vector<torch::Tensor> batches = sample.split(a.batch_size);
  spdlog::info("analyzing {} (step {}, {}) on {} sequences of {} tokens", ck.dir.string(), ck.step,
               mc.residual, wanted, mc.max_sequence_length);

  nlohmann::ordered_json doc = {{"checkpoint", ck.dir.string()},
                                {"step", ck.step},
                                {"topology", mc.residual},
                                {"n_layers", mc.n_layers},
                                {"sequences", wanted}};
  const auto mag = analysis::stream_magnitudes(*ck.model, batches);
  nlohmann::ordered_json m = nlohmann::ordered_json::object();
  for (const auto& [stream, v] : mag.by_stream) m[stream] = v;
  doc["magnitude"] = {
      {"layers", "index 0 = embeddings, i = after block i-1"}, {"streams", m}, {"final", mag.final_norm}};

  // The trainer's stream_stats rows, here on the first batch: with --batches 1 --batch-size
  // of the run's micro-batch over its data.paths, the trainer's own sample.
  doc["stream_stats"] = train::stream_stats_row(ck.step, analysis::stream_stats(*ck.model, batches.front()));

  const auto mix = analysis::stream_mixing(*ck.model);
  nlohmann::ordered_json sites = nlohmann::ordered_json::array();
  for (const auto& s : mix.sites)
    sites.push_back({{"layer", s.layer},
                     {"site", s.site},
                     {"x_scale", s.x_scale},
                     {"y_scale", s.y_scale},
                     {"x_share", s.x_share()}});
  doc["mixing"] = {{"sites", sites}};
  if (mix.final_x) doc["mixing"]["final"] = {{"x", *mix.final_x}, {"y", *mix.final_y}};

  nlohmann::ordered_json over_depth = nlohmann::ordered_json::array();
  for (const auto& e : analysis::depth_mixing(*ck.model, batches))
    over_depth.push_back({{"layer", e.layer}, {"site", e.site}, {"name", e.name}, {"mean", nested(e.mean)}});
  doc["depth_mixing"] = over_depth;

  const auto lens = analysis::logit_lens(*ck.model, batches);
  doc["logit_lens"] = {{"positions", lens.positions},
                       {"disagreeing", lens.disagreeing},
                       {"agreement", lens.agreement},
                       {"agreement_where_disagree", lens.agreement_where_disagree}};

  nlohmann::ordered_json depth = nlohmann::ordered_json::array();
  for (const auto& p : analysis::effective_depth(*ck.model, batches))
    depth.push_back({{"dropped", p.dropped}, {"loss", p.loss}, {"perplexity", p.perplexity}});
  doc["effective_depth"] = depth;

  for (const auto& [stream, v] : mag.by_stream)
    spdlog::info("magnitude {}: embeddings {:.2f} -> last block {:.2f}", stream, v.front(), v.back());
  if (mix.final_x)
    spdlog::info("final fusion: mean|ln_f| {:.3f}, mean|ln_y_f| {:.3f}", *mix.final_x, *mix.final_y);
  for (const auto& [stream, v] : lens.agreement)
    spdlog::info("logit lens {}: agrees {:.1f}% overall, {:.1f}% where streams disagree", stream, 100 * v,
                 100 * lens.agreement_where_disagree.at(stream));
  write_output(a.out, doc.dump(2) + "\n");
  return 0;
}

}  // namespace

void add_analyze_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<AnalyzeArgs>();
  auto* cmd = app.add_subcommand("analyze", "Per-stream magnitudes, mixing, logit lens, effective depth");
  cmd->add_option("checkpoint", args->checkpoint, "step<N> folder or run folder")->required();
  cmd->add_option("--data", args->data, "token files (validation split)")->required();
  cmd->add_option("--dtype", args->dtype, "token dtype (default: the config's data.memmap_dtype)")
      ->check(CLI::IsMember(config::spellings<config::TokenDtype>()));
  cmd->add_option("--batches", args->batches, "number of batches")->check(CLI::PositiveNumber);
  cmd->add_option("--batch-size", args->batch_size, "sequences per batch")->check(CLI::PositiveNumber);
  cmd->add_option("--out", args->out, "analysis JSON");
  cmd->add_option("--device", args->device, "auto | cpu | cuda");
  cmd->callback([&run, args] { run = [args] { return run_analyze(*args); }; });
}

}  // namespace siamese::cli
