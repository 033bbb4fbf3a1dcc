#include "siamese/train/setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "siamese/common/autocast.h"
#include "siamese/common/error.h"
#include "siamese/train/parallelize.h"

namespace siamese::train {

namespace {

// Without moe_dropless an expert keeps int(moe_capacity_factor * tokens * top_k / experts)
// assignments of each micro-batch (mlp.h). Where that is 0, every routed token is dropped on
// every step and the experts never train: refused before anything is built, not logged.
void check_moe_capacity(const config::ModelConfig& m, int64_t micro_batch) {
  if (!m.is_moe() || m.moe_dropless) return;
  // A sequence of T tokens is T - 1 inputs (the last token is only a target).
  const int64_t tokens = micro_batch * (m.max_sequence_length - 1);
  const double assignments = double(tokens) * double(m.moe_top_k);
  if (int64_t(m.moe_capacity_factor * assignments / double(m.moe_num_experts)) >= 1) return;
  throw Error(
      fmt::format("each expert may keep int({} x {} tokens x top {} / {} experts) = 0 assignments of a "
                  "micro-batch, so every routed token would be dropped and the experts would never train",
                  m.moe_capacity_factor, tokens, m.moe_top_k, m.moe_num_experts),
      "model.moe_capacity_factor",
      fmt::format("raise model.moe_capacity_factor to at least {:g} (1 assignment per expert), or set "
                  "model.moe_dropless: true",
                  std::ceil(1e4 * double(m.moe_num_experts) / assignments) / 1e4));
}

}  // namespace

Trainee build_trainee(const config::TrainConfig& cfg, torch::Device device, dist::ParallelPlan& plan) {
  Trainee t;
  t.micro_batch = std::min(cfg.device_train_microbatch_size,
                           cfg.global_train_batch_size / plan.collectives().world_size());
  check_moe_capacity(cfg.model, t.micro_batch);
  torch::manual_seed(cfg.seed);
  t.model = model::Transformer(cfg.model);
  t.model->to(device);
  parallelize(*t.model, plan);
  const WholeParamsOf whole{t.model->named_parameters(), &plan.layout()};
  t.optim = build_optimizer(cfg.optimizer, plan.layout().optimizer_params(whole.params), &whole);
  t.optim->allocate_state();
  hook_optimizer(*t.optim, *t.model, plan);
  t.scaler =
      std::make_unique<LossScaler>(cfg.precision == config::Precision::AmpFp16, cfg.fp16_initial_loss_scale,
                                   cfg.fp16_loss_scale_growth_interval, device);
  return t;
}

TrainStep Trainee::step(const config::StepSection& cfg, dist::ParallelPlan& plan, torch::Device device) {
  return TrainStep(cfg, *model, *optim, plan, *scaler, device, micro_batch);
}

}  // namespace siamese::train
