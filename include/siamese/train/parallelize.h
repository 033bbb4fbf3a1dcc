#pragma once
// The data-parallel strategy of a launched run, chosen once from distributed_strategy and
// fsdp.* (docs/distributed.md): ddp and fsdp NO_SHARD keep full replicas (dist/data_parallel.h),
// fsdp SHARD_GRAD_OP shards gradients, master weights and optimizer state, FULL_SHARD the
// parameters too, HYBRID_SHARD does FULL_SHARD within each node (dist/sharded.h). The config
// was validated: combinations that are refused never get here.
#include <memory>

#include "siamese/config/config.h"
#include "siamese/dist/gradient_sync.h"
#include "siamese/dist/sharded.h"
#include "siamese/dist/world.h"

namespace siamese::train {

std::unique_ptr<GradientSync> make_strategy(const TrainConfig& cfg, const World& world);

// The options of the sharded strategies (fsdp SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD).
ShardedOptions sharded_options(const TrainConfig& cfg, const World& world);

// Whether ddp and SHARD_GRAD_OP start reducing a bucket during backward (distributed.overlap),
// which activation checkpointing rules out: every recomputed block back-propagates on its own,
// so a parameter two blocks read (SiameseNorm's next-sublayer input norms) reports a gradient
// once from each, and a bucket counted complete at the first would be reduced without the
// second. block_type moe rules it out too: which experts get tokens differs between ranks, so
// do the autograd graphs and with them the order in which buckets complete, and collectives
// must start in one order everywhere. FULL_SHARD keeps its own rule, by block.
bool reduces_during_backward(const TrainConfig& cfg);

}  // namespace siamese::train
