#pragma once
// What each rank of a run holds, from the config alone. `siamese inspect CONFIG --world-size N`
// prints every strategy's row; train refuses, before allocating, a run whose row cannot fit
// (check_model_fits). Both read the same rows, so what inspect says is what train checks.
//
// Weights, gradients and AdamW's two moments are float32 (4 + 4 + 8 bytes per parameter, N
// parameters, W ranks sharing the state). Between steps a rank holds:
//   one process:    everything whole, 16N.
//   ddp / NO_SHARD: everything whole; the gradients twice (.grad and the all-reduce
//                   buckets), 20N.
//   SHARD_GRAD_OP:  whole parameters and a float32 master shard; gradient and optimizer
//                   shards, 4N + 16N/W.
//   FULL_SHARD:     the master shard is the blocks' only copy; the embedding, final norm
//                   and head also whole, 4N_outside + 16N/W.
//   HYBRID_SHARD:   FULL_SHARD within a node of `local_world` ranks (or world /
//                   fsdp.hybrid_sharding_num_model_replicas), replicated across them.
// During a step a sharded rank holds more, counted in `in_step`: the gradients of up to
// dist::kReduceScattersInFlight units being reduce-scattered (each unit whole, and on the
// CPU Gloo's copy of each), the whole gradients wherever there is more than one micro-batch
// (kept across them, as FSDP's no_sync does) and on the CPU in any case (glibc keeps the
// pieces backward frees, in sizes later allocations cannot take; measured 0.9-1.1x the
// gradients), else one unit's; and for FULL_SHARD three gathered blocks (the one computing,
// the next, which it may read, and the one in flight), three blocks' and the outside
// parameters' gradients not yet reduced, and on the CPU twice the blocks' parameters, which
// the allocator keeps of the storage each gather allocates anew (measured over 12 steps).
// Activations of one micro-batch (b = device_train_microbatch_size, s = max_sequence_length,
// h = d_model, a = n_heads, L = n_layers), after Korthikanti et al. 2022 (arXiv 2205.05198,
// eq. 2, 16-bit activations, twice that in float32): L * s*b*h * (34 + 5*a*s/h), the 5as/h
// term (attention scores) gone with flash attention; plus the logits and their gradient in float32 (8 *
// s*b*V, or a chunk of fused_loss_chunk_tokens with fused_loss). Checkpointing every block keeps each block's
// float32 input (4*s*b*h) and one block's activations.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "siamese/config/config.h"

namespace siamese::train {

struct RankMemory {
  std::string strategy;
  double parameters = 0, gradients = 0, optimizer = 0;  // bytes kept between steps
  double in_step = 0;                                   // bytes on top at the step's peak, activations aside
  double activations = 0, activations_checkpointed = 0;
  // Why train would refuse this strategy at this world size (HYBRID_SHARD's node size), or
  // empty; the byte counts are then 0.
  std::string refused;
  double state() const { return parameters + gradients + optimizer; }
  double peak() const { return state() + in_step; }
};

// One row per strategy for `world_size` ranks, nodes of `local_world` ranks, their
// collectives on Gloo (`on_cpu`) or NCCL, in this order: ddp / NO_SHARD ("one process" when
// world_size is 1), SHARD_GRAD_OP, FULL_SHARD, HYBRID_SHARD.
std::vector<RankMemory> plan_memory(const config::TrainConfig& cfg, int world_size, int local_world,
                                    bool on_cpu);

// The row of plan_memory that `cfg`'s strategy takes over `world_size` ranks (one process:
// the first row, whatever fsdp.* says).
RankMemory rank_memory(const config::TrainConfig& cfg, int world_size, int local_world, bool on_cpu);

// Refuses (siamese::Error naming the size key of the largest part, the bytes needed and the
// bytes there are) a rank whose peak state (`row.peak()`), times the `sharing` ranks that
// share one memory, exceeds `available` bytes. Activations are not counted: what is refused
// cannot fit at any batch size.
void check_memory_fits(const config::ModelConfig& model, const RankMemory& row, int world_size, int sharing,
                       double available, const std::string& where);

// check_memory_fits for this run on `device`: its strategy's row, against the device's memory,
// shared on the CPU by every rank of the node (`local_size`) and on CUDA by none. The
// processes would otherwise grow until the allocator or the kernel kills them, as 8 CPU ranks
// of a 1B model did after 95 s without a word.
void check_model_fits(const config::TrainConfig& cfg, torch::Device device, int world_size, int local_size);

}  // namespace siamese::train
