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

namespace {

// A value as json: a number, or nested lists in its shape.
nlohmann::ordered_json value_json(const model::HostValue& v, size_t dim = 0, size_t at = 0) {
  if (dim == v.shape.size()) return v.values[at];
  size_t stride = 1;
  for (size_t d = dim + 1; d < v.shape.size(); ++d) stride *= size_t(v.shape[d]);
  auto list = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < v.shape[dim]; ++i) list.push_back(value_json(v, dim + 1, at + size_t(i) * stride));
  return list;
}

}  // namespace

std::optional<double> StepMetrics::term(const std::string& name) const {
  for (const auto& v : terms)
    if (v.name == name && v.scalar()) return v.values.front();
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
  for (const auto& v : terms) row[v.name] = value_json(v);
  if (loss_scale) row["loss_scale"] = *loss_scale;
  if (filtered_instances) row[metric::kFilteredInstances] = *filtered_instances;
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
