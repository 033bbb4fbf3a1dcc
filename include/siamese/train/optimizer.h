#pragma once
// AdamW with OLMo's two parameter groups (olmo/optim.py get_param_groups): Linear weights
// decay; biases and norm weights decay only with decay_norm_and_bias, embeddings only with
// decay_embeddings. Names are sorted within each group, as OLMo does, so the optimizer
// state lines up across runs and resumes.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "siamese/config/config.h"

namespace siamese::train {

struct ParamGroups {
  std::vector<std::string> decay, no_decay;
};

ParamGroups param_groups(const OptimizerConfig& cfg,
                         const torch::OrderedDict<std::string, torch::Tensor>& params);

std::unique_ptr<torch::optim::AdamW> build_optimizer(
    const OptimizerConfig& cfg, const torch::OrderedDict<std::string, torch::Tensor>& params);

void set_learning_rate(torch::optim::Optimizer& optim, double lr);

}  // namespace siamese::train
