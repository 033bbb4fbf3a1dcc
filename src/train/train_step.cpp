#include "siamese/train/train_step.h"

#include <algorithm>
#include <limits>

#include <spdlog/spdlog.h>

#include "siamese/analysis/grad_norms.h"
#include "siamese/common/autocast.h"
#include "siamese/common/metrics_row.h"
#include "siamese/model/lm_loss.h"
#include "siamese/train/attention_kernels.h"

namespace siamese::train {
TrainStep::TrainStep(const config::StepSection& cfg, model::TransformerImpl& model, Optimizer& optim,
                     dist::ParallelPlan& plan, LossScaler& scaler, torch::Device device, int64_t micro_batch)
    : model_(model),
      optim_(optim),
      plan_(plan),
      scaler_(scaler),
      device_(device),
      autocast_(autocast_dtype(cfg.precision)),
      flash_attention_(model.config().flash_attention),
      micro_batch_(micro_batch),
      predicted_tokens_(double(cfg.global_batch) * double(model.config().max_sequence_length - 1)),
      max_grad_norm_(cfg.max_grad_norm.value_or(std::numeric_limits<double>::infinity())),
      z_loss_multiplier_(cfg.z_loss_multiplier),
      global_rows_(double(cfg.global_batch)),
      uneven_shares_(cfg.instance_filter && plan.collectives().world_size() > 1),
      n_layers_(model.config().n_layers),
      params_(optim.params()) {
  if (cfg.generate_doc_lengths)
    documents_ = model::DocumentRule{model.config().eos_token_id, cfg.rope_restart_per_document};
  if (cfg.cuda_graphs) {
    if (auto why = cuda_graph_refusal(cfg, device, plan.collectives().world_size(), plan.blocks() != nullptr))
      spdlog::warn("cuda_graphs: off for this run: {}", *why);
    else
      graph_ = std::make_unique<MicroBatchGraph>();
  }
}

StepResult TrainStep::run(const torch::Tensor& batch, double lr, const StepOptions& options) {
  auto mark = [&] { return options.clock ? options.clock->mark() : size_t(0); };
  if (graph_)
    optim_.zero_grad_in_place();
  else
    optim_.zero_grad();
  StepResult result;
  // An empty batch still runs one (empty) micro-batch, so that every rank joins the
  // gradient all-reduce. Where the instance filter leaves ranks unequal shares, every rank
  // runs as many micro-batches as the longest share needs, the extra ones empty: FULL_SHARD
  // gathers each block in every forward, and a rank that stopped early would leave the others
  // waiting in an all-gather. Empty micro-batches add nothing to the loss or the gradients.
  int64_t n_micro = std::max<int64_t>(1, (batch.size(0) + micro_batch_ - 1) / micro_batch_);
  if (uneven_shares_) n_micro = int64_t(plan_.collectives().max(double(n_micro)));
  {
    const AttentionKernelScope kernels(flash_attention_);
    // A graph casts the weights inside itself: a cast cached outside would be read after the
    // cache let it go.
    std::optional<StepCastCache> casts;
    if (autocast_ && !plan_.blocks() && !graph_) casts.emplace();
    for (int64_t m = 0; m < n_micro; ++m) {
      const int64_t first = std::min(m * micro_batch_, batch.size(0));
      auto ids = batch.narrow(0, first, std::min(micro_batch_, batch.size(0) - first));
      const bool graphed = graph_ && ids.size(0) == micro_batch_;
      const size_t forward_start = mark();
      size_t backward_start = forward_start;
      auto work = [&](const torch::Tensor& x) {
        // Each micro-batch's auxiliary losses count at its share of the global batch (OLMo), so
        // that their sum over micro-batches and ranks is their mean.
        const double share = double(x.size(0)) / global_rows_;
        model::AuxLosses aux{scaler_.scale_tensor() * share, share};
        MicroBatchOutput out;
        {
          std::optional<AutocastGuard> amp;
          if (autocast_) amp.emplace(device_, *autocast_);
          out.sums = model::lm_loss_sums(model_, x, z_loss_multiplier_, documents_, &aux);
        }
        if (!graphed) backward_start = mark();
        plan_.gradients().set_requires_sync(m == n_micro - 1);
        scaler_.scaled(out.sums.total() / predicted_tokens_).backward();
        out.values = std::move(aux.values);
        return out;
      };
      const MicroBatchOutput out = graphed ? graph_->run(ids, work) : work(ids);
      result.values.add(metric::kLoss, out.sums.nll / predicted_tokens_);
      if (out.sums.z.defined()) result.values.add(metric::kZLoss, out.sums.z / predicted_tokens_);
      result.values.merge(out.values);
      if (options.marks) options.marks->micro_batches.push_back({forward_start, backward_start, mark()});
    }
  }
  optim_.prepare_gradients();
  if (options.marks) options.marks->update_start = mark();
  scaler_.unscale_(params_);
  if (options.layer_grad_norms)
    result.layer_grad_norms =
        analysis::per_layer_grad_norms(optim_.named_params(), n_layers_, plan_.layout());
  result.values.reduce([&](torch::Tensor& t) { plan_.collectives().sum_(t); });
  const torch::Tensor grad_norm = clip_grad_norm(params_, max_grad_norm_, &plan_.layout());
  // A non-finite loss or gradient never reaches the weights.
  const torch::Tensor skip =
      torch::logical_not(result.values.all_finite().logical_and(torch::isfinite(grad_norm)))
          .to(torch::kFloat);
  optim_.set_learning_rate(lr);
  optim_.update(skip);
  result.grad_norm = grad_norm.to(torch::kFloat64);
  result.loss_scale = scaler_.scale_tensor();
  scaler_.update(torch::logical_not(torch::isfinite(grad_norm)));
  return result;
}

}  // namespace siamese::train
