#pragma once
// Per-layer hidden-state magnitude of every residual stream (paper Fig. 2a), read through
// the model's probe hook only, so it works for every topology: layer -1 is the state after
// the embeddings, layer i the state after block i, and "final" the LM head's input.
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "siamese/model/transformer.h"

namespace siamese::analysis {

struct StreamMagnitudes {
  // stream name -> mean over tokens of the L2 norm over d_model, indexed by layer + 1
  // (entry 0 = embeddings, entry n_layers = after the last block).
  std::map<std::string, std::vector<double>> by_stream;
  double final_norm = 0;  // the same for the head's input
};

// Averages over `batches` (each [B, T] token ids), in eval mode without gradients.
StreamMagnitudes stream_magnitudes(model::TransformerImpl& model, const std::vector<torch::Tensor>& batches);

}  // namespace siamese::analysis
