#pragma once
// What each rank of a data-parallel run holds, from the config alone (`siamese inspect
// CONFIG --world-size N`): bytes of parameters, gradients and optimizer state under each
// strategy, and an activation estimate with and without activation checkpointing.
//
// Weights, gradients and AdamW's two moments are float32 (4 + 4 + 8 bytes per parameter).
//   ddp / NO_SHARD: everything whole; the gradients twice (.grad and the all-reduce buckets).
//   SHARD_GRAD_OP:  whole parameters; gradient and optimizer shards of 1/N, plus one bucket
//                   (distributed.bucket_mb) of full gradients in flight.
//   FULL_SHARD:     the blocks' parameters sharded too, plus three blocks gathered (the one
//                   computing, the next, which it may read, and the one in flight); the
//                   embedding, final norm and head whole.
//   HYBRID_SHARD:   FULL_SHARD within a node of `local_world` ranks (or world /
//                   fsdp.hybrid_sharding_num_model_replicas), replicated across them.
// Activations of one micro-batch (b = device_train_microbatch_size, s = max_sequence_length,
// h = d_model, a = n_heads, L = n_layers), after Korthikanti et al. 2022 (arXiv 2205.05198,
// eq. 2, 16-bit activations): L * s*b*h * (34 + 5*a*s/h), the 5as/h term (attention scores)
// gone with flash attention; plus the logits and their gradient in float32 (8 * s*b*V, or a
// chunk of fused_loss_chunk_tokens with fused_loss). Checkpointing every block keeps each
// block's float32 input (4*s*b*h) and one block's activations.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "siamese/config/config.h"

namespace siamese::train {

struct RankMemory {
  std::string strategy;
  double parameters = 0, gradients = 0, optimizer = 0;  // bytes
  double activations = 0, activations_checkpointed = 0;
  // Why train would refuse this strategy at this world size (HYBRID_SHARD's node size), or
  // empty; the byte counts are then 0.
  std::string refused;
  double state() const { return parameters + gradients + optimizer; }
};

// One row per strategy for `world_size` ranks, nodes of `local_world` ranks, in this order:
// ddp / NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD (strategy_row picks by it).
std::vector<RankMemory> plan_memory(const config::TrainConfig& cfg, int world_size, int local_world);

// The row of plan_memory that `cfg`'s strategy takes over `world_size` ranks (one process:
// the replica's row, whatever fsdp.* says).
const RankMemory& strategy_row(const std::vector<RankMemory>& plan, const config::TrainConfig& cfg,
                               int world_size);

// Refuses (siamese::Error naming the size key of the largest part, the bytes needed and the
// bytes the device has) a run whose weights, gradients and optimizer state alone exceed the
// memory of `device`: this rank's share under the run's strategy (plan_memory), times the
// ranks that share the memory, which on the CPU is every rank of the node (`local_size`) and
// on CUDA one. The processes would otherwise grow until the allocator or the kernel kills
// them, as 8 CPU ranks of a 1B model did after 95 s without a word.
void check_model_fits(const config::TrainConfig& cfg, torch::Device device, int world_size, int local_size);

}  // namespace siamese::train
