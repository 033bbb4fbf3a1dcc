#pragma once
// The weights with which a topology mixes its streams over depth, averaged over tokens: mHC's
// pre / post weights and comb matrix per sublayer, AttnRes's softmax over its sources per
// sublayer and at the head. Read through the model's mixing probe (State::mixing), so it
// works for every topology; one with fixed mixing (Pre-Norm, ...) gives no entries.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "siamese/model/transformer.h"

namespace siamese::analysis {

struct DepthMixingEntry {
  int64_t layer = 0;   // n_layers for the head
  std::string site;    // "attn", "ffn" or "final"
  std::string name;    // the topology's name for the weights ("comb", "attnres", ...)
  torch::Tensor mean;  // float64, the weights' shape without the leading [B, T]
};

// Averages over every token of `batches` (each [B, T] token ids), in eval mode without
// gradients; entries in the order the forward pass produces them.
std::vector<DepthMixingEntry> depth_mixing(model::TransformerImpl& model,
                                           const std::vector<torch::Tensor>& batches);

}  // namespace siamese::analysis
