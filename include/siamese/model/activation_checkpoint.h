#pragma once
// Activation checkpointing: run a piece of the network without keeping its activations and
// run it again in backward. Memory then holds only the piece's inputs; the cost is one more
// forward of the piece. OLMo's `activation_checkpointing` picks which blocks (transformer.h).
#include <torch/torch.h>

#include <functional>
#include <vector>

#include "siamese/config/enums.h"

namespace siamese::model {

using TensorsFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// fn(inputs) with gradients for `inputs` and for every parameter fn uses. The backward
// recomputes fn with the random generators (dropout) and the autocast state it saw in
// forward, so the recomputed activations equal the originals bit for bit.
std::vector<torch::Tensor> checkpointed(const std::vector<torch::Tensor>& inputs, TensorsFn fn);

// Whether block `layer` is checkpointed under OLMo's setting: "" none, whole_layer all,
// one_in_two / one_in_three / one_in_four every n-th block starting at block 0.
bool checkpoints_block(config::ActivationCheckpointing setting, int64_t layer);

}  // namespace siamese::model
