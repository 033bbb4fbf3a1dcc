#pragma once
// Dynamic loss scaling for precision amp_fp16 (Micikevicius et al. 2018, arXiv 1710.03740).
// float16 keeps 5 exponent bits: gradients below ~6e-8 flush to zero. The loss is multiplied
// by a scale S before backward and the gradients divided by S before clipping and the
// update. A step whose unscaled gradient norm is not finite overflowed: its update is
// skipped (the trainer's device-side skip flag) and S halves; after `growth_interval` steps
// in a row without an overflow S doubles. The constants are torch.amp.GradScaler's defaults
// (initial 2^16, factors 2 and 0.5, interval 2000). Every operation stays on the device, so
// a CUDA step never waits for the host.
#include <torch/torch.h>

#include <vector>

#include "siamese/train/stateful.h"

namespace siamese::train {

class LossScaler : public Stateful {
 public:
  // Disabled (any precision but amp_fp16), scaled() and unscale_() leave their inputs alone.
  LossScaler(bool enabled, double initial_scale, int64_t growth_interval, torch::Device device);

  bool enabled() const { return enabled_; }
  torch::Tensor scaled(const torch::Tensor& loss) const;
  // Divides every defined gradient by S, in place.
  void unscale_(const std::vector<torch::Tensor>& params) const;
  // overflow: a bool or 0/1 scalar on the device, true when this step's gradients were not
  // finite. Call once per optimizer step, after the update.
  void update(const torch::Tensor& overflow);

  // S as a float64 scalar on the device (for the step's metrics row, read with the loss).
  torch::Tensor scale_tensor() const { return scale_.to(torch::kFloat64); }

  // Host values (reading waits for the device).
  double scale() const { return scale_.item<double>(); }
  int64_t good_steps() const { return good_steps_.item<int64_t>(); }
  void restore(double scale, int64_t good_steps);

  // loss_scale (float64; 0 when disabled) and loss_scale_good_steps. A checkpoint of a run
  // without a scale (0, or none) leaves this one as it is.
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  bool enabled_;
  int64_t growth_interval_;
  torch::Tensor scale_;       // float32 scalar
  torch::Tensor good_steps_;  // int64 scalar: steps since the last overflow or growth
};

}  // namespace siamese::train
