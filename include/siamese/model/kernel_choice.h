#pragma once
// model.kernels.* applied: each custom kernel family switched on or off (kernels/families.h)
// for the process. `siamese train`, `siamese bench` and the commands that run a checkpoint
// call it once, before the model runs.
#include "siamese/config/config.h"
#include "siamese/kernels/families.h"

namespace siamese::model {

// The choice for `family`: its own key, else model.kernels.all.
config::KernelChoice kernel_choice(const config::KernelsConfig& cfg, kernels::Family family);

void use_kernels(const config::KernelsConfig& cfg);

}  // namespace siamese::model
