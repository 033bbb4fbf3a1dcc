#pragma once
// Mixed precision for the scope of a guard: autocast on `device`'s type with `dtype`
// (bf16 or fp16). Matmuls run in the half type, norms and the loss in float32, weights stay
// float32 (as torch.autocast does).
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <atomic>
#include <optional>
#include <string>

#include "siamese/config/enums.h"

namespace siamese {

// The half type a `precision` setting autocasts to: amp_bf16, amp_fp16; none for fp32.
inline std::optional<at::ScalarType> autocast_dtype(config::Precision precision) {
  switch (precision) {
    case config::Precision::AmpBf16:
      return at::kBFloat16;
    case config::Precision::AmpFp16:
      return at::kHalf;
    case config::Precision::Fp32:
      break;
  }
  return std::nullopt;
}

// The type a matmul of `t` runs in: the autocast type where autocast is on for t's device
// (it casts float32, float16 and bfloat16 operands), else t's own. For kernels that are not
// autocast ops, whose operands we cast ourselves.
inline at::ScalarType matmul_dtype(const torch::Tensor& t) {
  const auto type = t.device().type();
  if (t.scalar_type() == at::kDouble || !at::autocast::is_autocast_enabled(type)) return t.scalar_type();
  return at::autocast::get_autocast_dtype(type);
}

// While one lives, autocast keeps its half copies of float32 weights (its cast cache) from one
// guard to the next: a training step's micro-batches cast every weight once, not once each
// (on an H100, every micro-batch of OLMo-1B cast its 1.2B weights again). The cache is
// cleared when the last one ends, so that the optimizer's update is cast afresh. ATen's cache
// is one per process (a cleared cache on one thread is cleared for all), and casts made under
// no-grad keep their autograd history, so a recomputation's forward (activation checkpointing,
// the chunked loss) may reuse a cast its first, no-grad forward made. Only for weights that
// stay whole for the whole scope: a strategy that gathers and frees them per block must not
// keep their copies.
class StepCastCache {
 public:
  StepCastCache() { ++depth(); }
  ~StepCastCache() {
    if (--depth() == 0) at::autocast::clear_cache();
  }
  StepCastCache(const StepCastCache&) = delete;
  StepCastCache& operator=(const StepCastCache&) = delete;
  static bool active() { return depth() > 0; }

 private:
  static std::atomic<int>& depth() {
    static std::atomic<int> d{0};
    return d;
  }
};

class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, at::ScalarType dtype)
      : type_(device.type()),
        was_enabled_(at::autocast::is_autocast_enabled(type_)),
        previous_dtype_(at::autocast::get_autocast_dtype(type_)) {
    at::autocast::set_autocast_dtype(type_, dtype);
    at::autocast::set_autocast_enabled(type_, true);
  }
  ~AutocastGuard() {
    at::autocast::set_autocast_enabled(type_, was_enabled_);
    at::autocast::set_autocast_dtype(type_, previous_dtype_);
    if (!was_enabled_ && !StepCastCache::active()) at::autocast::clear_cache();
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  torch::DeviceType type_;
  bool was_enabled_;
  at::ScalarType previous_dtype_;
};

// Full precision for the scope of a guard under an autocast: for computations that must stay
// in their operands' dtype (mHC's connection weights and Sinkhorn iterations).
class AutocastPause {
 public:
  explicit AutocastPause(torch::DeviceType type)
      : type_(type), was_enabled_(at::autocast::is_autocast_enabled(type)) {
    if (was_enabled_) at::autocast::set_autocast_enabled(type_, false);
  }
  ~AutocastPause() {
    if (was_enabled_) at::autocast::set_autocast_enabled(type_, true);
  }
  AutocastPause(const AutocastPause&) = delete;
  AutocastPause& operator=(const AutocastPause&) = delete;

 private:
  torch::DeviceType type_;
  bool was_enabled_;
};

}  // namespace siamese
