#pragma once
// Parallelism applied once (torchtitan's parallelize.py). The plan of a launched run is chosen
// from distributed_strategy and fsdp.* (docs/distributed.md): ddp and fsdp NO_SHARD keep full
// replicas (dist/data_parallel.h), fsdp SHARD_GRAD_OP shards gradients, master weights and
// optimizer state, FULL_SHARD the parameters too, HYBRID_SHARD does FULL_SHARD within each node
// (dist/sharded.h). The config was validated: combinations that are refused never get here.
// The plan is then applied to the model once, and its post-step work hooked on the optimizer.
#include <memory>

#include "siamese/config/config.h"
#include "siamese/dist/parallel_plan.h"
#include "siamese/dist/sharded.h"
#include "siamese/dist/world.h"
#include "siamese/model/transformer.h"
#include "siamese/train/optimizer.h"

namespace siamese::train {

// Refuses a model this launch's plan cannot hold, before any connection or allocation: a
// topology whose project_weights rewrites whole weight matrices after every step (nGPT) under a
// strategy that keeps only a flat shard of each parameter between uses.
void check_plan_fits_model(const config::TrainConfig& cfg);

// The plan of a launched run; the ranks agree on every setting before it builds its groups.
std::unique_ptr<dist::ParallelPlan> make_plan(const config::TrainConfig& cfg, const dist::World& world);

// Applies `plan` to a model just built: every rank's parameters become rank 0's, the plan takes
// charge of their gradients (hooks that communicate during backward) and installs its block
// hooks (FULL_SHARD gathers a block's parameters around it). Once, before the optimizer.
void parallelize(model::TransformerImpl& model, dist::ParallelPlan& plan);

// The post-step work, in order, as the optimizer's hooks: the plan makes the parameters whole,
// the topology projects its weights (nGPT), and the plan's shards take those values.
void hook_optimizer(Optimizer& optim, model::TransformerImpl& model, dist::ParallelPlan& plan);

// HYBRID_SHARD's model replicas over `world_size` ranks, nodes of `local_size` (0: the
// launcher did not say): fsdp.hybrid_sharding_num_model_replicas, or one per node (OLMo's
// default). Refused, naming the key, where neither gives a count that splits the ranks.
int hybrid_replicas(const config::TrainConfig& cfg, int world_size, int local_size);

// The options of the sharded strategies (fsdp SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD).
dist::ShardedOptions sharded_options(const config::TrainConfig& cfg, const dist::World& world);

// Whether ddp and SHARD_GRAD_OP start reducing a bucket during backward (distributed.overlap),
// which activation checkpointing rules out: every recomputed block back-propagates on its own,
// so a parameter two blocks read (SiameseNorm's next-sublayer input norms) reports a gradient
// once from each, and a bucket counted complete at the first would be reduced without the
// second. block_type moe rules it out too: which experts get tokens differs between ranks, so
// do the autograd graphs and with them the order in which buckets complete, and collectives
// must start in one order everywhere. FULL_SHARD keeps its own rule, by block.
bool reduces_during_backward(const config::TrainConfig& cfg);

}  // namespace siamese::train
