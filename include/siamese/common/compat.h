#pragma once
// Every difference between LibTorch versions lives here: Debian's 1.13 (CPU, CI) and the
// 2.x builds used on GPUs. Code elsewhere calls these wrappers and never tests versions.
#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/autocast_mode.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace siamese::compat {

inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

// Causal (or unmasked) attention with the fastest kernel the library has.
// q, k, v: [B, H, T, hd] with equal head counts.
inline torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v, double dropout_p,
                                                  bool is_causal) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, is_causal);
#else
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p,
                                                       /*need_attn_weights=*/false, is_causal));
#endif
}

// The concrete Gloo/NCCL process groups derive from ProcessGroup in 1.13 and from Backend
// in 2.x; both offer the same allreduce/broadcast/barrier calls.
#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif

// Autocast (mixed precision) for the scope of the guard on `device`'s type. 1.13 has
// per-device setters (set_cpu_enabled / set_enabled for CUDA); 2.4+ takes the device type.
class AutocastGuard {
 public:
  AutocastGuard(torch::Device device, at::ScalarType dtype) : type_(device.type()) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(type_, dtype);
    at::autocast::set_autocast_enabled(type_, true);
#else
    if (type_ == torch::kCPU) {
      at::autocast::set_autocast_cpu_dtype(dtype);
      at::autocast::set_cpu_enabled(true);
    } else {
      at::autocast::set_autocast_gpu_dtype(dtype);
      at::autocast::set_enabled(true);
    }
#endif
  }
  ~AutocastGuard() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(type_, false);
#else
    if (type_ == torch::kCPU)
      at::autocast::set_cpu_enabled(false);
    else
      at::autocast::set_enabled(false);
#endif
    at::autocast::clear_cache();
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  torch::DeviceType type_;
};

}  // namespace siamese::compat
