#include "siamese/model/kernel_choice.h"

namespace siamese::model {

config::KernelChoice kernel_choice(const config::KernelsConfig& cfg, kernels::Family family) {
  config::KernelChoice own = config::KernelChoice::Unset;
  switch (family) {
    case kernels::Family::Norm:
      own = cfg.norm;
      break;
    case kernels::Family::Swiglu:
      own = cfg.swiglu;
      break;
    case kernels::Family::CrossEntropy:
      own = cfg.cross_entropy;
      break;
    case kernels::Family::Rope:
      own = cfg.rope;
      break;
    case kernels::Family::QkvHeads:
      own = cfg.qkv_heads;
      break;
  }
  if (own != config::KernelChoice::Unset) return own;
  return cfg.all == config::KernelChoice::Aten ? config::KernelChoice::Aten : config::KernelChoice::Fused;
}

void use_kernels(const config::KernelsConfig& cfg) {
  for (kernels::Family f : kernels::kFamilies)
    kernels::set_enabled(f, kernel_choice(cfg, f) == config::KernelChoice::Fused);
}

}  // namespace siamese::model
