#include "siamese/train/setup.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "siamese/common/autocast.h"

namespace siamese::train {

Trainee build_trainee(const TrainConfig& cfg, torch::Device device, GradientSync& sync) {
  Trainee t;
  torch::manual_seed(cfg.seed);
  t.model = model::Transformer(cfg.model);
  t.model->to(device);
  sync.attach(t.model->parameters());
  const WholeParamsOf whole{t.model->named_parameters(), &sync};
  t.optim = build_optimizer(cfg.optimizer, sync.optimizer_params(whole.params), &whole);
  t.model->set_block_hooks(sync.block_hooks());
  t.optim->allocate_state();
  model::TransformerImpl& m = *t.model;
  t.optim->add_post_step_hook([&sync] { sync.after_update(); });
  t.optim->add_post_step_hook([&m, &sync] {
    m.topology().project_weights(m);
    sync.params_changed();
  });
  t.scaler = std::make_unique<LossScaler>(cfg.precision == "amp_fp16", cfg.fp16_initial_loss_scale,
                                          cfg.fp16_loss_scale_growth_interval, device);
  t.micro_batch = std::min(cfg.device_train_microbatch_size, cfg.global_train_batch_size / sync.world_size());
  return t;
}

TrainStep Trainee::step(const TrainConfig& cfg, GradientSync& sync, torch::Device device) {
  return TrainStep(cfg, *model, *optim, sync, *scaler, device, micro_batch);
}

}  // namespace siamese::train
