#include "siamese/train/memory_plan.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "siamese/common/error.h"
#include "siamese/model/accounting.h"
#include "siamese/train/parallelize.h"

namespace siamese::train {

std::vector<RankMemory> plan_memory(const config::TrainConfig& cfg, int world_size, int local_world) {
  const config::ModelConfig& m = cfg.model;
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

const RankMemory& strategy_row(const std::vector<RankMemory>& plan, const config::TrainConfig& cfg,
                               int world_size) {
  if (world_size <= 1 || !config::shards_optimizer_state(cfg)) return plan[0];
  if (!config::shards_parameters(cfg)) return plan[1];
  return cfg.fsdp.sharding_strategy == config::ShardingStrategy::HybridShard ? plan[3] : plan[2];
}

void check_model_fits(const config::TrainConfig& cfg, torch::Device device, int world_size, int local_size) {
  const config::ModelConfig& model = cfg.model;
  double available = 0;
  if (device.is_cuda()) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) available = double(total_bytes);
  } else {
    available = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  }
  const int sharing = device.is_cuda() ? 1 : std::max(1, std::min(local_size, world_size));
  const model::StateBytes parts = model::training_state_parts(model);
  // This rank's share: the whole state on one process or a replica, the strategy's row of
  // plan_memory otherwise. plan_memory counts parameters in int64, safe below 2^59 bytes of
  // state; a model above that exceeds any device whatever share of it a rank holds.
  double share = 1;
  std::string strategy;
  if (world_size > 1 && config::shards_optimizer_state(cfg) && parts.total() < 0x1p59) {
    const auto plan = plan_memory(cfg, world_size, std::max(1, local_size));
    const RankMemory& row = strategy_row(plan, cfg, world_size);
    // A strategy train refuses at this size is refused where it is chosen, with its reason.
    if (!row.refused.empty()) return;
    share = row.state() / plan[0].state();
    strategy = row.strategy;
  }
  const double needed = parts.total() * share * double(sharing);
  if (available <= 0 || needed <= available) return;
  std::string how;
  if (share < 1 || sharing > 1)
    how = fmt::format(" ({:.3g} GiB a rank{}{})", parts.total() * share / double(1 << 30),
                      strategy.empty() ? "" : fmt::format(" under {} over {} ranks", strategy, world_size),
                      sharing > 1 ? fmt::format(", and {} ranks share the memory", sharing) : "");
  // The key of the largest part is the one to name: 2M experts are moe_num_experts' doing,
  // whatever d_model is.
  std::string key, part;
  double largest = 0;
  if (parts.mlp >= parts.attention && parts.mlp >= parts.embedding) {
    largest = parts.mlp;
    part = "the MLPs";
    key = model.block_type == config::BlockType::Moe
              ? fmt::format("model.moe_num_experts {}", model.moe_num_experts)
          : model.mlp_hidden_size ? fmt::format("model.mlp_hidden_size {}", *model.mlp_hidden_size)
                                  : fmt::format("model.mlp_ratio {}", model.mlp_ratio);
  } else if (parts.attention >= parts.embedding) {
    largest = parts.attention;
    part = "attention";
    key = fmt::format("model.d_model {}", model.d_model);
  } else {
    largest = parts.embedding;
    part = "the embeddings";
    key = fmt::format("model.embedding_size {}", model.embedding_size);
  }
  throw Error(
      fmt::format("the model needs {:.3g} GiB for its weights, gradients and AdamW state alone{}; {} has "
                  "{:.3g} GiB; {} take {:.0f}% of it",
                  needed / double(1 << 30), how, device.str(), available / double(1 << 30), part,
                  100.0 * largest / parts.total()),
      fmt::format("{} (model.d_model {}, model.n_layers {})", key, model.d_model, model.n_layers),
      "make the model smaller (" + key.substr(0, key.find(' ')) + " first), or shard it over more devices");
}

}  // namespace siamese::train
