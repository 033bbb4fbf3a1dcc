#pragma once
// Ranks launched with different configs (a stale file on one node, an environment variable
// that differs) would otherwise meet in the first collective with tensors of different
// shapes, where Gloo aborts the process and NCCL hangs until the timeout. Before any
// collective that depends on the config, every rank checks that all ranks resolved the same
// value for every config key and see the same world, and all refuse together naming the keys
// that differ.
#include <torch/torch.h>

#include "siamese/config/config.h"
#include "siamese/dist/collectives.h"

namespace siamese::train {

// Throws siamese::Error on every rank when any key (or the world size, or the device kind)
// differs between ranks. A world of one returns at once. make_plan calls it once, over the
// world group, before a plan builds groups of its own.
void check_ranks_agree(dist::Collectives& ranks, const config::TrainConfig& cfg, torch::Device device);

}  // namespace siamese::train
