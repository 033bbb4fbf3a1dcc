#include "siamese/train/setup.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "siamese/common/autocast.h"
#include "siamese/common/error.h"
#include "siamese/model/moe_mlp.h"
#include "siamese/train/parallelize.h"

namespace siamese::train {

Trainee build_trainee(const config::TrainConfig& cfg, torch::Device device, dist::ParallelPlan& plan) {
  Trainee t;
  t.micro_batch = std::min(cfg.device_train_microbatch_size,
                           cfg.global_train_batch_size / plan.collectives().world_size());
  model::check_moe_capacity(cfg.model, t.micro_batch);
  torch::manual_seed(cfg.seed);
  t.model = model::Transformer(cfg.model);
  t.model->to(device);
  parallelize(*t.model, plan);
  const WholeParamsOf whole{t.model->named_parameters(), &plan.layout()};
  t.optim =
      build_optimizer(cfg.optimizer, plan.layout().optimizer_params(whole.params), &whole, &t.model->shape());
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
