#pragma once
// Mixed precision for the scope of a guard: autocast on `device`'s type with `dtype`
// (bf16 or fp16). Matmuls run in the half type, norms and the loss in float32, weights stay
// float32 (as torch.autocast does).
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <optional>
#include <string>

namespace siamese {

// The half type a `precision` setting autocasts to: amp_bf16, amp_fp16; none for fp32.
inline std::optional<at::ScalarType> autocast_dtype(const std::string& precision) {
  if (precision == "amp_bf16") return at::kBFloat16;
  if (precision == "amp_fp16") return at::kHalf;
  return std::nullopt;
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
