#include "siamese/kernels/families.h"

#include <atomic>

namespace siamese::kernels {
namespace {

std::array<std::atomic<bool>, kFamilies.size()> g_enabled = {true, true, true, true, true};

size_t index_of(Family f) { return static_cast<size_t>(f); }

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::Norm:
      return "norm";
    case Family::Swiglu:
      return "swiglu";
    case Family::CrossEntropy:
      return "cross_entropy";
    case Family::Rope:
      return "rope";
    case Family::QkvHeads:
      return "qkv_heads";
  }
  return "unknown";
}

// The CUDA kernels read and write float32, bfloat16 and float16 alike (kernels/dtype.h). The
// CPU loops exist in float32 and bfloat16, the norms' also in float64; RoPE's CPU rotation is
// four ATen passes into the output's halves, in float32 tables.
bool has_kernel(Family f, torch::ScalarType dtype, torch::DeviceType backend) {
  const bool half = dtype == torch::kBFloat16 || dtype == torch::kHalf;
  if (backend == torch::kCUDA) return dtype == torch::kFloat || half;
  if (backend != torch::kCPU) return false;
  switch (f) {
    case Family::Norm:
      return dtype == torch::kFloat || dtype == torch::kDouble || dtype == torch::kBFloat16;
    case Family::Swiglu:
    case Family::CrossEntropy:
    case Family::QkvHeads:
    case Family::Rope:
      return dtype == torch::kFloat || dtype == torch::kBFloat16;
  }
  return false;
}

bool enabled(Family f) { return g_enabled[index_of(f)].load(std::memory_order_relaxed); }

void set_enabled(Family f, bool on) { g_enabled[index_of(f)].store(on, std::memory_order_relaxed); }

bool takes(Family f, const torch::Tensor& t) {
  return enabled(f) && has_kernel(f, t.scalar_type(), t.device().type());
}

KernelSwitches::KernelSwitches() {
  for (Family f : kFamilies) saved_[index_of(f)] = enabled(f);
}

KernelSwitches::~KernelSwitches() {
  for (Family f : kFamilies) set_enabled(f, saved_[index_of(f)]);
}

}  // namespace siamese::kernels
