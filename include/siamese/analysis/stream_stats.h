#pragma once
// The residual-path quantities the normalization papers argue from, on one batch: per layer
// and per stream (named by the topology, as stream_magnitudes names them) the stream's RMS,
// each sublayer's output RMS, each attention layer's largest logit, and the weights
// multi-stream topologies mix with. The trainer logs them every stream_stats_interval steps
// (train/stream_stats_log.h) and `siamese analyze` of a checkpoint computes the same.
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "siamese/model/transformer.h"

namespace siamese::analysis {

struct StreamStats {
  // stream -> mean over tokens of sqrt(mean over d_model of x^2), indexed by layer + 1
  // (entry 0: after the embeddings; entry n_layers: after the last block).
  std::map<std::string, std::vector<double>> stream_rms;
  double final_rms = 0;  // the LM head's input
  // "attn" / "ffn" -> each layer's sublayer output RMS, before residual dropout.
  std::map<std::string, std::vector<double>> sublayer_rms;
  std::vector<double> max_attn_logit;  // per layer: attention's largest scale * q.k
  // "attn.pre", "ffn.comb", ... -> per layer, the mixing weights averaged over tokens
  // (flattened); empty for topologies with fixed mixing.
  std::map<std::string, std::vector<std::vector<double>>> mixing;
};

// In eval mode (no dropout draws, so training's random streams are untouched) without
// gradients; the model's mode is put back. `batch`: [B, T] token ids.
StreamStats stream_stats(model::TransformerImpl& model, const torch::Tensor& batch);

}  // namespace siamese::analysis
