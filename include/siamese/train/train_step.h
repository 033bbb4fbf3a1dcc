#pragma once
// One optimizer step, the same for `siamese train`, `siamese bench` and the tests: forward
// and backward over micro-batches (autocast, the flash-only attention scope, loss scaling,
// gradient synchronisation) of the cross-entropy plus, with softmax_auxiliary_loss, OLMo's
// z-loss; unscale, clip, and an update that a non-finite loss or gradient cancels on the
// device. Nothing here waits for the device.
#include <torch/torch.h>

#include <array>
#include <functional>
#include <optional>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/dist/gradient_sync.h"
#include "siamese/model/documents.h"
#include "siamese/model/transformer.h"
#include "siamese/train/device_clock.h"
#include "siamese/train/loss_scale.h"
#include "siamese/train/metrics.h"
#include "siamese/train/optimizer.h"

namespace siamese::train {

// What a step leaves on the device, float64 scalars.
struct StepResult {
  torch::Tensor loss;        // mean next-token loss over the global batch (summed over ranks)
  torch::Tensor grad_norm;   // global gradient norm before clipping
  torch::Tensor loss_scale;  // the scale this step's backward used (1 without amp_fp16)
  torch::Tensor z_loss;      // mean z-loss, like `loss` (0 without softmax_auxiliary_loss)
  // block_type moe: the load-balancing and router z-losses before their weights (each the
  // mean over blocks), like `loss`; 0 for a dense model. The step trains on
  // loss + moe_loss_weight * moe_lbl_loss + moe_zloss_weight * moe_z_loss.
  torch::Tensor moe_lbl_loss, moe_z_loss;
  std::optional<MoeLoad> moe_load;  // block_type moe: this rank's routing (host values)
};

// Device-clock marks of a step's phases (the bench's breakdown).
struct StepMarks {
  std::vector<std::array<size_t, 3>> micro_batches;  // forward start, backward start, backward end
  size_t update_start = 0;
};

class TrainStep {
 public:
  // micro_batch: sequences per forward on this rank. Each micro-batch's loss is its share of
  // the mean over cfg.global_train_batch_size sequences (all ranks).
  TrainStep(const TrainConfig& cfg, model::TransformerImpl& model, Optimizer& optim, GradientSync& sync,
            LossScaler& scaler, torch::Device device, int64_t micro_batch);

  // Runs one step on `batch` [rank's sequences, T] (already on the device) at learning rate
  // `lr`. The batch may hold fewer sequences than the rank's share (the instance filter left
  // some out, none at all included): the loss is still divided by the full global count, as
  // OLMo's loss over instances masked by the filter. `before_clip` sees the unscaled, unclipped gradients
  // (per-layer norms); `marks` takes the phase marks of `clock`.
  StepResult run(const torch::Tensor& batch, double lr, const std::function<void()>& before_clip = {},
                 DeviceClock* clock = nullptr, StepMarks* marks = nullptr);

 private:
  model::TransformerImpl& model_;
  Optimizer& optim_;
  GradientSync& sync_;
  LossScaler& scaler_;
  torch::Device device_;
  std::optional<at::ScalarType> autocast_;
  bool flash_attention_;
  int64_t micro_batch_;
  double predicted_tokens_;  // B * (T - 1) of the global batch: the loss normaliser
  double max_grad_norm_;
  std::optional<double> z_loss_multiplier_;       // set with softmax_auxiliary_loss
  std::optional<model::DocumentRule> documents_;  // set with data.generate_doc_lengths
  double global_rows_;                            // cfg.global_train_batch_size
  double moe_loss_weight_, moe_zloss_weight_;     // 0 when off
  bool moe_log_assignment_;
  std::vector<torch::Tensor> params_;  // what the optimizer updates (its gradients are unscaled, clipped)
};

}  // namespace siamese::train
