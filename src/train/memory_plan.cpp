#include "siamese/train/memory_plan.h"

#include <algorithm>

#include "siamese/common/error.h"
#include "siamese/model/accounting.h"
#include "siamese/train/parallelize.h"

namespace siamese::train {

std::vector<RankMemory> plan_memory(const TrainConfig& cfg, int world_size, int local_world) {
  const ModelConfig& m = cfg.model;
  const auto counts = model::count_parameters(m);
  const double N = double(counts.total()), W = double(world_size);
  // HYBRID_SHARD's shard group: world / replicas ranks, by train's rule (a node by default);
  // where train would refuse the launch, so does the row.
  std::string hybrid_refused;
  double G = 0;
  try {
    G = W / double(hybrid_replicas(cfg, world_size, std::min(world_size, local_world)));
  } catch (const Error& e) {
    hybrid_refused = e.what();
  }
  const double block = double(counts.attention + counts.mlp + counts.residual) / double(m.n_layers);
  const double bucket = cfg.distributed.bucket_mb * 1048576.0;

  const double b =
      double(std::min(cfg.device_train_microbatch_size, cfg.global_train_batch_size / world_size));
  const double s = double(m.max_sequence_length), h = double(m.d_model), a = double(m.n_heads);
  const double L = double(m.n_layers);
  const double per_block = s * b * h * (34.0 + (m.flash_attention ? 0.0 : 5.0 * a * s / h));
  const double logit_tokens =
      m.fused_loss.value_or(false) ? std::min(s * b, double(m.fused_loss_chunk_tokens)) : s * b;
  const double logits = 8.0 * logit_tokens * double(m.embedding_size);
  const double activations = L * per_block + logits;
  const double checkpointed = L * 4.0 * s * b * h + per_block + logits;

  auto row = [&](std::string name, double params, double grads, double optim) {
    return RankMemory{std::move(name), params, grads, optim, activations, checkpointed, {}};
  };
  const double whole = 4.0 * N;
  // Sharding parameters reaches only the blocks' (embedding, final norm and head stay whole),
  // and three blocks are gathered at a time: the one computing, the next (which it may read),
  // the one after in flight.
  const double outside_blocks = 4.0 * (N - block * double(m.n_layers));
  const double gathered = 3.0 * 4.0 * block;
  auto sharded_params = [&](double ranks) {
    return outside_blocks + (whole - outside_blocks) / ranks + gathered;
  };
  return {
      row("ddp / NO_SHARD", whole, 2.0 * whole, 2.0 * whole),
      row("SHARD_GRAD_OP", whole, whole / W + std::min(bucket, whole), 2.0 * whole / W),
      row("FULL_SHARD", sharded_params(W), whole / W + gathered, 2.0 * whole / W),
      hybrid_refused.empty() ? row("HYBRID_SHARD", sharded_params(G), whole / G + gathered, 2.0 * whole / G)
                             : RankMemory{"HYBRID_SHARD", 0, 0, 0, 0, 0, hybrid_refused},
  };
}

}  // namespace siamese::train
