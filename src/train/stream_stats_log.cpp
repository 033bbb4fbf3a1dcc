#include "siamese/train/stream_stats_log.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace siamese::train {

MetricsRow stream_stats_row(int64_t step, const analysis::StreamStats& stats) {
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  for (const auto& [stream, v] : stats.stream_rms) fields["rms." + stream] = v;
  fields["final_rms"] = stats.final_rms;
  for (const auto& [site, v] : stats.sublayer_rms) fields["sublayer_rms." + site] = v;
  fields["max_attn_logit"] = stats.max_attn_logit;
  for (const auto& [name, v] : stats.mixing) fields["mixing." + name] = v;
  return metrics_row(step, metric::kStreamStatsEvent, fields);
}

StreamStatsLog::StreamStatsLog(std::optional<int64_t> interval, const data::TokenDataset& dataset,
                               int64_t sample_size, torch::Device device)
    : interval_(interval) {
  if (interval_) sample_ = data::spread_sample(dataset, sample_size).to(device);
}

MetricsRow StreamStatsLog::row(int64_t step, model::TransformerImpl& model) {
  const auto start = std::chrono::steady_clock::now();
  MetricsRow r = stream_stats_row(step, analysis::stream_stats(model, sample_));
  if (!timed_) {
    timed_ = true;
    spdlog::info("stream_stats at step {}: {:.3f} s for {} sequences (every {} steps)", step,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                 sample_.size(0), *interval_);
  }
  return r;
}

}  // namespace siamese::train
