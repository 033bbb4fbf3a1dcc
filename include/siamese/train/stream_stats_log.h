#pragma once
// stream_stats_interval: every N steps, after the step's update, the residual-stream
// statistics (analysis/stream_stats.h) of one fixed sample of the training data, a
// micro-batch of instances spread over it (data::spread_sample), as a metrics row of event
// stream_stats: metrics.jsonl, and TensorBoard one scalar per layer. Between intervals it
// costs a comparison; at one, a forward without gradients. Every rank computes it (a sharded
// model needs them all for the forward); rank 0's reporter writes it.
#include <torch/torch.h>

#include <cstdint>
#include <optional>

#include "siamese/analysis/stream_stats.h"
#include "siamese/common/metrics_row.h"
#include "siamese/data/token_dataset.h"
#include "siamese/model/transformer.h"

namespace siamese::train {

// The row: "rms.<stream>" [n_layers + 1] (entry 0 after the embeddings), "final_rms",
// "sublayer_rms.attn" / "sublayer_rms.ffn" [n_layers], "max_attn_logit" [n_layers], and for
// multi-stream topologies "mixing.<site>.<name>" [n_layers][weights].
MetricsRow stream_stats_row(int64_t step, const analysis::StreamStats& stats);

class StreamStatsLog {
 public:
  StreamStatsLog(std::optional<int64_t> interval, const data::TokenDataset& dataset, int64_t sample_size,
                 torch::Device device);

  bool due(int64_t step) const { return interval_ && step % *interval_ == 0; }
  // The first one also logs what it took, for the cost at the interval.
  MetricsRow row(int64_t step, model::TransformerImpl& model);
  const torch::Tensor& sample() const { return sample_; }

 private:
  std::optional<int64_t> interval_;
  torch::Tensor sample_;  // [sample_size, T] on the device, taken once
  bool timed_ = false;
};

}  // namespace siamese::train
