#include "siamese/train/train_step.h"

#include <algorithm>
#include <limits>

#include "siamese/common/autocast.h"
#include "siamese/model/lm_loss.h"
#include "siamese/train/runtime.h"

namespace siamese::train {

TrainStep::TrainStep(const TrainConfig& cfg, model::TransformerImpl& model, Optimizer& optim,
                     GradientSync& sync, LossScaler& scaler, torch::Device device, int64_t micro_batch)
    : model_(model),
      optim_(optim),
      sync_(sync),
      scaler_(scaler),
      device_(device),
      autocast_(autocast_dtype(cfg.precision)),
      flash_attention_(cfg.model.flash_attention),
      micro_batch_(micro_batch),
      predicted_tokens_(double(cfg.global_train_batch_size) * double(cfg.model.max_sequence_length - 1)),
      max_grad_norm_(cfg.max_grad_norm.value_or(std::numeric_limits<double>::infinity())),
      z_loss_multiplier_(cfg.softmax_auxiliary_loss ? std::optional<double>(cfg.auxiliary_loss_multiplier)
                                                    : std::nullopt),
      documents_(model::document_rule(cfg)),
      params_(optim.params()) {}

StepResult TrainStep::run(const torch::Tensor& batch, double lr, const std::function<void()>& before_clip,
                          DeviceClock* clock, StepMarks* marks) {
  auto mark = [&] { return clock ? clock->mark() : size_t(0); };
  optim_.zero_grad();
  // The global batch's mean cross-entropy and z-loss, summed over micro-batches, then ranks.
  auto losses = torch::zeros({2}, torch::dtype(torch::kFloat64).device(device_));
  // An empty batch still runs one (empty) micro-batch, so that every rank joins the
  // gradient all-reduce.
  const int64_t n_micro = std::max<int64_t>(1, (batch.size(0) + micro_batch_ - 1) / micro_batch_);
  {
    const AttentionKernelScope kernels(flash_attention_);
    for (int64_t m = 0; m < n_micro; ++m) {
      auto ids = batch.narrow(0, m * micro_batch_, std::min(micro_batch_, batch.size(0) - m * micro_batch_));
      const size_t forward_start = mark();
      model::LossSums sums;
      {
        std::optional<AutocastGuard> amp;
        if (autocast_) amp.emplace(device_, *autocast_);
        sums = model::lm_loss_sums(model_, ids, z_loss_multiplier_, documents_);
      }
      const size_t backward_start = mark();
      sync_.before_backward(m == n_micro - 1);
      scaler_.scaled(sums.total() / predicted_tokens_).backward();
      losses.select(0, 0).add_(sums.nll.detach() / predicted_tokens_);
      if (sums.z.defined()) losses.select(0, 1).add_(sums.z.detach() / predicted_tokens_);
      if (m == n_micro - 1) sync_.after_backward();
      if (marks) marks->micro_batches.push_back({forward_start, backward_start, mark()});
    }
  }
  if (marks) marks->update_start = mark();
  scaler_.unscale_(params_);
  if (before_clip) before_clip();
  sync_.sum_(losses);
  const torch::Tensor grad_norm = clip_grad_norm(params_, max_grad_norm_, &sync_);
  // A non-finite loss or gradient never reaches the weights.
  const torch::Tensor skip =
      torch::logical_not(torch::isfinite(losses).all().logical_and(torch::isfinite(grad_norm)))
          .to(torch::kFloat);
  optim_.set_learning_rate(lr);
  optim_.update(skip);
  sync_.after_update();
  model_.topology().project_weights(model_);
  // A projection (nGPT) changed the whole weights: a sharded strategy's master shard follows.
  sync_.params_changed();
  StepResult result{losses[0], grad_norm.to(torch::kFloat64), scaler_.scale_tensor(), losses[1]};
  scaler_.update(torch::logical_not(torch::isfinite(grad_norm)));
  return result;
}

}  // namespace siamese::train
