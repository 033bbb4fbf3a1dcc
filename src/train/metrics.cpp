#include "siamese/train/metrics.h"
#include "siamese/model/accounting.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/common/json_line.h"
#include "siamese/model/transformer.h"

namespace siamese::train {

namespace fs = std::filesystem;

std::optional<MoeLoad> moe_load(const std::vector<model::ExpertLoad>& routing, bool keep_counts) {
  if (routing.empty()) return std::nullopt;
  MoeLoad load;
  load.min_share = 1.0;
  int64_t assignments = 0, dropped = 0;
  for (const auto& block : routing) {
    assignments += block.assignments;
    dropped += block.dropped;
    double total = 0.0;
    for (int64_t n : block.tokens_per_expert) total += double(n);
    if (total <= 0) continue;
    for (int64_t n : block.tokens_per_expert) {
      const double p = double(n) / total;
      load.min_share = std::min(load.min_share, p);
      load.max_share = std::max(load.max_share, p);
      if (p > 0) load.entropy -= p * std::log(p) / double(routing.size());
    }
  }
  load.dropped_fraction = assignments > 0 ? double(dropped) / double(assignments) : 0.0;
  if (keep_counts)
    for (const auto& block : routing) load.tokens_per_expert.push_back(block.tokens_per_expert);
  return load;
}

std::optional<double> StepMetrics::term(const std::string& name) const {
  for (const auto& [n, v] : terms)
    if (n == name) return v;
  return std::nullopt;
}

double StepMetrics::perplexity() const { return std::exp(loss); }

double StepMetrics::tokens_per_sec() const { return step_seconds > 0 ? step_tokens / step_seconds : 0.0; }

std::optional<double> StepMetrics::mfu() const {
  if (!peak_flops || *peak_flops <= 0) return std::nullopt;
  return model::mfu(tokens_per_sec(), flops_per_token, *peak_flops);
}

MetricsRow StepMetrics::to_row() const {
  const auto m = mfu();
  MetricsRow row = metrics_row(step, "",
                               {{metric::kTokens, tokens},
                                {metric::kLoss, loss},
                                {metric::kPerplexity, perplexity()},
                                {metric::kLearningRate, lr},
                                {"grad_norm", grad_norm},
                                {"tokens_per_sec", tokens_per_sec()},
                                {metric::kStepSeconds, step_seconds},
                                {"flops_per_token", flops_per_token},
                                {"mfu", m ? nlohmann::ordered_json(*m) : nlohmann::ordered_json()},
                                {"elapsed", elapsed},
                                {metric::kLossSpike, loss_spike},
                                {"comm_seconds", comm_seconds},
                                {"comm_share", step_seconds > 0 ? comm_seconds / step_seconds : 0.0},
                                {"peak_memory_mib", peak_memory_mib}});
  for (const auto& [name, value] : terms) row[name] = value;
  if (loss_scale) row["loss_scale"] = *loss_scale;
  if (filtered_instances) row[metric::kFilteredInstances] = *filtered_instances;
  if (moe_load) {
    row["moe_load_min"] = moe_load->min_share;
    row["moe_load_max"] = moe_load->max_share;
    row["moe_load_entropy"] = moe_load->entropy;
    row["moe_dropped_fraction"] = moe_load->dropped_fraction;
    if (!moe_load->tokens_per_expert.empty()) row["moe_expert_tokens"] = moe_load->tokens_per_expert;
  }
  return row;
}

namespace {
constexpr const char* kMetricsFix =
    "free disk space in save_folder; the run resumes from its newest checkpoint and the log keeps "
    "every row written before";
}  // namespace

MetricsLog::MetricsLog(const fs::path& path, int64_t resume_step) {
  fs::create_directories(path.parent_path().empty() ? fs::path(".") : path.parent_path());
  if (fs::exists(path)) {
    std::vector<std::string> kept;
    read_metrics_rows(path.string(), [&](const nlohmann::json& row, const std::string& line) {
      if (!(row.contains("step") && row["step"].is_number_integer() &&
            row["step"].get<int64_t>() > resume_step))
        kept.push_back(line);
    });
    std::string text;
    for (const auto& l : kept) text += l + '\n';
    write_file_atomically(path, text, kMetricsFix);
  }
  out_ = std::make_unique<FileSink>(path, kMetricsFix, FileSink::Mode::Append);
  out_->check();
}

void MetricsLog::write(const MetricsRow& row) {
  out_->write(json_line(row) + '\n');
  out_->check();
}

bool SpikeDetector::observe(double loss) {
  bool spike = false;
  if (recent_.size() >= 10) {
    std::vector<double> v(recent_.begin(), recent_.end());
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    spike = loss > factor_ * v[v.size() / 2];
  }
  recent_.push_back(loss);
  if (recent_.size() > window_) recent_.pop_front();
  return spike;
}

}  // namespace siamese::train
