#pragma once
// Mixed precision for the scope of a guard: autocast on `device`'s type with `dtype`
// (bf16 or fp16). Matmuls run in the half type, norms and the loss in float32, weights stay
// float32 (as torch.autocast does).
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

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
    if (!was_enabled_) at::autocast::clear_cache();
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
