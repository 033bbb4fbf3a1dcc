#pragma once
// The data-parallel strategy of a launched run, chosen once from distributed_strategy and
// fsdp.* (docs/distributed.md): ddp and fsdp NO_SHARD keep full replicas (dist/data_parallel.h),
// fsdp SHARD_GRAD_OP shards gradients, master weights and optimizer state (dist/sharded.h).
// The config was validated: the strategies not implemented yet never get here.
#include <memory>

#include "siamese/config/config.h"
#include "siamese/dist/gradient_sync.h"
#include "siamese/dist/world.h"

namespace siamese::train {

std::unique_ptr<GradientSync> make_strategy(const TrainConfig& cfg, const World& world);

}  // namespace siamese::train
