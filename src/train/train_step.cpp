#include "siamese/train/train_step.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "siamese/common/autocast.h"
#include "siamese/model/lm_loss.h"
#include "siamese/train/runtime.h"

namespace siamese::train {
namespace {

std::optional<MoeLoad> moe_load(std::vector<std::vector<int64_t>> tokens, int64_t assignments,
                                int64_t dropped, bool keep_counts) {
  if (tokens.empty()) return std::nullopt;
  MoeLoad load;
  load.min_share = 1.0;
  for (const auto& block : tokens) {
    double total = 0.0;
    for (int64_t n : block) total += double(n);
    if (total <= 0) continue;
    for (int64_t n : block) {
      const double p = double(n) / total;
      load.min_share = std::min(load.min_share, p);
      load.max_share = std::max(load.max_share, p);
      if (p > 0) load.entropy -= p * std::log(p) / double(tokens.size());
    }
  }
  load.dropped_fraction = assignments > 0 ? double(dropped) / double(assignments) : 0.0;
  if (keep_counts) load.tokens_per_expert = std::move(tokens);
  return load;
}

}  // namespace

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
      global_rows_(double(cfg.global_train_batch_size)),
      moe_loss_weight_(cfg.model.moe_loss_weight),
      moe_zloss_weight_(cfg.model.moe_zloss_weight.value_or(0.0)),
      moe_log_assignment_(cfg.model.moe_log_expert_assignment),
      params_(optim.params()) {}

StepResult TrainStep::run(const torch::Tensor& batch, double lr, const std::function<void()>& before_clip,
                          DeviceClock* clock, StepMarks* marks) {
  auto mark = [&] { return clock ? clock->mark() : size_t(0); };
  optim_.zero_grad();
  // The global batch's mean cross-entropy and z-loss, summed over micro-batches, then ranks.
  // Then the MoE load-balancing and router z-losses, each a micro-batch's by its share of rows.
  auto losses = torch::zeros({4}, torch::dtype(torch::kFloat64).device(device_));
  std::vector<std::vector<int64_t>> expert_tokens;  // per block, summed over micro-batches
  int64_t assignments = 0, dropped = 0;
  // An empty batch still runs one (empty) micro-batch, so that every rank joins the
  // gradient all-reduce.
  const int64_t n_micro = std::max<int64_t>(1, (batch.size(0) + micro_batch_ - 1) / micro_batch_);
  {
    const AttentionKernelScope kernels(flash_attention_);
    for (int64_t m = 0; m < n_micro; ++m) {
      auto ids = batch.narrow(0, m * micro_batch_, std::min(micro_batch_, batch.size(0) - m * micro_batch_));
      const size_t forward_start = mark();
      model::LossSums sums;
      model::MoeLosses moe;
      {
        std::optional<AutocastGuard> amp;
        if (autocast_) amp.emplace(device_, *autocast_);
        sums = model::lm_loss_sums(model_, ids, z_loss_multiplier_, documents_);
        moe = model_.moe_losses();
      }
      const size_t backward_start = mark();
      sync_.before_backward(m == n_micro - 1);
      auto loss = sums.total() / predicted_tokens_;
      if (moe.load_balancing.defined()) {
        // OLMo adds each micro-batch's auxiliary losses at its share of the batch, so that
        // summing over micro-batches and ranks gives their mean.
        const double share = double(ids.size(0)) / global_rows_;
        const auto lbl = moe.load_balancing.to(torch::kFloat64), z = moe.z_loss.to(torch::kFloat64);
        loss = loss + (share * (moe_loss_weight_ * lbl + moe_zloss_weight_ * z)).to(loss.scalar_type());
        losses.select(0, 2).add_(share * lbl.detach());
        losses.select(0, 3).add_(share * z.detach());
        const auto stats = model_.moe_stats();
        expert_tokens.resize(stats.size());
        for (size_t b = 0; b < stats.size(); ++b) {
          auto& into = expert_tokens[b];
          into.resize(stats[b]->tokens_per_expert.size(), 0);
          for (size_t e = 0; e < into.size(); ++e) into[e] += stats[b]->tokens_per_expert[e];
          assignments += stats[b]->assignments;
          dropped += stats[b]->dropped;
        }
      }
      scaler_.scaled(loss).backward();
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
  StepResult result{losses[0],
                    grad_norm.to(torch::kFloat64),
                    scaler_.scale_tensor(),
                    losses[1],
                    losses[2],
                    losses[3],
                    moe_load(expert_tokens, assignments, dropped, moe_log_assignment_)};
  scaler_.update(torch::logical_not(torch::isfinite(grad_norm)));
  return result;
}

}  // namespace siamese::train
