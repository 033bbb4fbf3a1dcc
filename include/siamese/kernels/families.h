#pragma once
// The custom kernel families and the one declaration of what each has code for: the dtypes on
// each backend. The kernels' *_supports checks, the op table (kernels/op_table.h, `siamese
// kernels --check`) and the model's off switches (model.kernels.*) all read it, so a dtype a
// kernel takes cannot be missing from the table that tests it.
//
// A family switched off is never taken: every caller falls back to its ATen composition, as
// it does for a dtype without a kernel. The switches are process-wide, as PyTorch's
// torch.backends flags are: a run sets them once from its config (train/kernel_choice.h).
#include <torch/torch.h>

#include <array>
#include <string>
#include <vector>

namespace siamese::kernels {

enum class Family {
  Norm,          // RMSNorm, LayerNorm and the two-stream update with its norms (fused_norm.h)
  Swiglu,        // a silu(b) and its backward (swiglu.h)
  CrossEntropy,  // softmax statistics and the cross-entropy gradient (cross_entropy.h)
  Rope,          // RoPE's rotation on CUDA (rope.h); the CPU runs ATen passes
  QkvHeads,      // attention's head preparation: norms and RoPE in one pass (qkv_heads.h)
};
inline constexpr std::array<Family, 5> kFamilies = {Family::Norm, Family::Swiglu, Family::CrossEntropy,
                                                    Family::Rope, Family::QkvHeads};

// "norm", "swiglu", "cross_entropy", "rope", "qkv_heads": the config's and the table's names.
const char* family_name(Family f);

// Whether the family has code for `dtype` on `backend`, switched on or off.
bool has_kernel(Family f, torch::ScalarType dtype, torch::DeviceType backend);
// Whether the family is switched on (the default).
bool enabled(Family f);
void set_enabled(Family f, bool on);
// Whether a call on `t` takes the family's kernel: it is on, and it has code for t's dtype
// on t's device.
bool takes(Family f, const torch::Tensor& t);

// The switches for the length of a scope (the check, the tests), restored after.
class KernelSwitches {
 public:
  KernelSwitches();
  ~KernelSwitches();
  KernelSwitches(const KernelSwitches&) = delete;
  KernelSwitches& operator=(const KernelSwitches&) = delete;

 private:
  std::array<bool, kFamilies.size()> saved_;
};

}  // namespace siamese::kernels
