#pragma once
// The training step's choice of attention kernel (model.flash_attention), and the check that
// the flash kernel can run a model before anything is allocated.
#include <torch/torch.h>

#include <optional>

#include "siamese/config/config.h"

namespace siamese::train {

// model.flash_attention: true restricts at::scaled_dot_product_attention to its flash
// kernel (OLMo then calls the flash-attn package) in the training step; false lets it pick
// any kernel, flash included when the inputs allow. Evaluation and generation always let it
// choose: they run float32 and masked passes the flash kernel does not take.
//
// Refuses (siamese::Error, with the reason) a model the flash kernel cannot run on `device`
// with `autocast` (float32 on CUDA, attention dropout on the CPU, a head size it does not
// take) when flash_attention is true; nothing to check otherwise. Call before training.
void check_flash_attention(const config::ModelConfig& model, torch::Device device,
                           std::optional<at::ScalarType> autocast);

// While alive and `flash_only`, scaled_dot_product_attention may use only its flash kernel
// (process-wide LibTorch flags, restored on destruction). Held around a training step's
// forward and backward, so that recomputation under activation checkpointing uses it too.
class AttentionKernelScope {
 public:
  explicit AttentionKernelScope(bool flash_only);
  ~AttentionKernelScope();
  AttentionKernelScope(const AttentionKernelScope&) = delete;
  AttentionKernelScope& operator=(const AttentionKernelScope&) = delete;

 private:
  bool active_;
  bool flash_, mem_efficient_, cudnn_, math_;
};

}  // namespace siamese::train
