#pragma once
// Effective depth (paper Sec. 5): validation perplexity after dropping the last k blocks,
// k = 0 .. n_layers/2. The truncated model runs blocks 0..L-k-1 and then the topology's
// usual final path and LM head (ForwardOptions::n_blocks), nothing retrained.
#include <torch/torch.h>

#include <vector>

#include "siamese/model/transformer.h"

namespace siamese::analysis {

struct DepthPoint {
  int64_t dropped = 0;  // k
  double loss = 0;      // mean next-token cross-entropy
  double perplexity = 0;
};

// Mean next-token cross-entropy over `batches` ([B, T] ids) with only `n_blocks` blocks.
double lm_loss(model::TransformerImpl& model, const std::vector<torch::Tensor>& batches, int64_t n_blocks);

std::vector<DepthPoint> effective_depth(model::TransformerImpl& model,
                                        const std::vector<torch::Tensor>& batches);

}  // namespace siamese::analysis
