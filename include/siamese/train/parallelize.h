#pragma once
// Parallelism applied once (torchtitan's parallelize.py). The plan of a launched run is chosen
// from distributed_strategy and fsdp.* (docs/distributed.md): ddp and fsdp NO_SHARD keep full
// replicas (dist/data_parallel.h), fsdp SHARD_GRAD_OP shards gradients, master weights and
// optimizer state, FULL_SHARD the parameters too, HYBRID_SHARD does FULL_SHARD within each node
// (dist/sharded.h). The config was validated: combinations that are refused never get here.
// The plan is then applied to the model once, and its post-step work hooked on the optimizer.
#include "siamese/config/config.h"
#include "siamese/config/sections.h"
#include "siamese/dist/communicator.h"
#include "siamese/dist/parallel_plan.h"
#include "siamese/dist/sharded.h"
#include "siamese/dist/world.h"
#include "siamese/model/transformer.h"
#include "siamese/train/optimizer.h"

namespace siamese::train {

// Refuses a model this launch's plan cannot hold, before any connection or allocation: a
// topology whose project_weights rewrites whole weight matrices after every step (nGPT) under a
// strategy that keeps only a flat shard of each parameter between uses.
void check_plan_fits_model(const config::ParallelSection& parallel);

// The collectives' backend distributed.backend asks for ranks whose tensors live on `device`
// (auto: none, the Communicator's choice by device). nccl without a CUDA device is refused,
// naming the key.
std::optional<dist::Backend> comm_backend(const config::DistributedConfig& distributed, torch::Device device);

// The plan of a launched run; the ranks agree on every setting before it builds its groups.
dist::ParallelPlan make_plan(const config::TrainConfig& cfg, const dist::World& world);

// Applies `plan` to a model just built: every rank's parameters become rank 0's, the plan's
// gradient strategy takes charge of their gradients (hooks that communicate during backward)
// and its block runner, if any, runs the blocks (FULL_SHARD gathers a block's parameters
// around it). Once, before the optimizer.
void parallelize(model::TransformerImpl& model, dist::ParallelPlan& plan);

// The strategy's work around the update, as the optimizer's hooks: before it the strategy
// waits for its gradient communication; after it the strategy makes the parameters whole, and
// a topology that projects its weights (nGPT) does so, the strategy's shards taking those values.
void hook_optimizer(Optimizer& optim, model::TransformerImpl& model, dist::ParallelPlan& plan);

// HYBRID_SHARD's model replicas over `world_size` ranks, nodes of `local_size` (0: the
// launcher did not say): fsdp.hybrid_sharding_num_model_replicas, or one per node (OLMo's
// default). Refused, naming the key, where neither gives a count that splits the ranks.
int hybrid_replicas(const config::ParallelSection& parallel, int world_size, int local_size);

// The options of the sharded strategies (fsdp SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD).
dist::ShardedOptions sharded_options(const config::ParallelSection& parallel, const dist::World& world);

// Whether ddp and SHARD_GRAD_OP start reducing a bucket during backward (distributed.overlap),
// which activation checkpointing rules out: every recomputed block back-propagates on its own,
// so a parameter two blocks read (SiameseNorm's next-sublayer input norms) reports a gradient
// once from each, and a bucket counted complete at the first would be reduced without the
// second. block_type moe rules it out too: which experts get tokens differs between ranks, so
// do the autograd graphs and with them the order in which buckets complete, and collectives
// must start in one order everywhere. FULL_SHARD keeps its own rule, by block.
bool reduces_during_backward(const config::ParallelSection& parallel);

}  // namespace siamese::train
