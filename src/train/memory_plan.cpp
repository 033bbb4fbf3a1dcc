#include "siamese/train/memory_plan.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "siamese/common/autocast.h"
#include "siamese/common/error.h"
#include "siamese/dist/sharded.h"
#include "siamese/model/accounting.h"
#include "siamese/model/attention.h"
#include "siamese/model/mlp.h"
#include "siamese/train/parallelize.h"

namespace siamese::train {

namespace {

// Elements of the model's largest tensor: a unit of reduce-scatter holds at least one.
double largest_tensor(const config::ModelConfig& m) {
  const double d = double(m.d_model), kv = double(model::kv_head_count(m)) * (d / double(m.n_heads));
  const double mlp = m.is_moe() ? double(m.moe_num_experts) * 2.0 * double(model::mlp_inner_size(m)) * d
                                : double(model::mlp_hidden_size(m)) * d;
  return std::max({double(m.embedding_size) * d, mlp, d * (d + 2.0 * kv)});
}

}  // namespace

std::vector<RankMemory> plan_memory(const config::TrainConfig& cfg, int world_size, int local_world,
                                    bool on_cpu) {
  const config::ModelConfig& m = cfg.model;
  const auto counts = model::count_parameters(m);
  const double N = double(counts.total()), W = double(world_size);
  // HYBRID_SHARD's shard group: world / replicas ranks, by train's rule (a node by default);
  // where train would refuse the launch, so does the row.
  std::string hybrid_refused;
  double G = 0;
  try {
    G = W /
        double(hybrid_replicas(config::parallel_section(cfg), world_size, std::min(world_size, local_world)));
  } catch (const Error& e) {
    hybrid_refused = e.what();
  }
  const double block = 4.0 * double(counts.attention + counts.mlp + counts.residual) / double(m.n_layers);
  const double outside = 4.0 * N - double(m.n_layers) * block;
  const double whole = 4.0 * N;

  const double rows = double(cfg.global_train_batch_size / world_size);
  const double b = std::min(double(cfg.device_train_microbatch_size), rows);
  const bool accumulates = rows > b;
  const double s = double(m.max_sequence_length), h = double(m.d_model), a = double(m.n_heads);
  const double L = double(m.n_layers);
  // Korthikanti's counts are for 16-bit activations; without autocast they are float32.
  const double width = autocast_dtype(cfg.precision) ? 1.0 : 2.0;
  const double per_block = width * s * b * h * (34.0 + (m.flash_attention ? 0.0 : 5.0 * a * s / h));
  const double logit_tokens =
      m.fused_loss.value_or(false) ? std::min(s * b, double(m.fused_loss_chunk_tokens)) : s * b;
  const double logits = 8.0 * logit_tokens * double(m.embedding_size);
  const double activations = L * per_block + logits;
  const double checkpointed = L * 4.0 * s * b * h + per_block + logits;

  auto row = [&](std::string name, double params, double grads, double optim, double in_step) {
    return RankMemory{std::move(name), params, grads, optim, in_step, activations, checkpointed, {}};
  };
  // A unit of reduce-scatter holds at least one tensor; SHARD_GRAD_OP's are buckets (or
  // blocks), FULL_SHARD's the blocks and the outside parameters' runs.
  const double tensor = 4.0 * largest_tensor(m);
  const double bucket =
      std::min(whole, std::max(cfg.fsdp.wrapping_strategy == config::WrappingStrategy::ByBlock
                                   ? block
                                   : cfg.distributed.bucket_mb * 1048576.0,
                               tensor));
  const double unit = std::min(whole, std::max(block, tensor));
  // The units in flight, each whole, and Gloo's copy of each input.
  const double in_flight = double(dist::kReduceScattersInFlight) * (on_cpu ? 2.0 : 1.0);
  // Whole gradients: kept across micro-batches (as FSDP's no_sync), and on the CPU counted
  // in any case, since the pieces backward frees stay with glibc's allocator in sizes later
  // allocations cannot reuse (measured: 0.9-1.1x the gradients with one micro-batch).
  const bool whole_grads = accumulates || on_cpu;
  const double zero2 = (whole_grads ? whole : bucket) + in_flight * bucket;
  // FULL_SHARD: three blocks gathered, the gradients not yet reduced (three blocks and the
  // outside parameters), and the next block's all-gather buffers (its output, a whole unit,
  // and this rank's row). The buffers are reused from step to step (dist::BufferPool), so
  // the allocator's slack does not grow with the steps.
  const double zero3 =
      3.0 * block + (whole_grads ? whole : 3.0 * block + outside) + in_flight * unit + unit * (1.0 + 1.0 / W);
  auto sharded = [&](std::string name, double ranks) {
    return row(std::move(name), outside + whole / ranks, whole / ranks, 2.0 * whole / ranks, zero3);
  };
  return {
      world_size == 1 ? row("one process", whole, whole, 2.0 * whole, 0)
                      : row("ddp / NO_SHARD", whole, 2.0 * whole, 2.0 * whole, 0),
      row("SHARD_GRAD_OP", whole + whole / W, whole / W, 2.0 * whole / W, zero2),
      sharded("FULL_SHARD", W),
      hybrid_refused.empty() ? sharded("HYBRID_SHARD", G)
                             : RankMemory{"HYBRID_SHARD", 0, 0, 0, 0, 0, 0, hybrid_refused},
  };
}

RankMemory rank_memory(const config::TrainConfig& cfg, int world_size, int local_world, bool on_cpu) {
  const auto plan = plan_memory(cfg, world_size, local_world, on_cpu);
  if (world_size <= 1 || !config::shards_optimizer_state(cfg)) return plan[0];
  if (!config::shards_parameters(cfg)) return plan[1];
  return cfg.fsdp.sharding_strategy == config::ShardingStrategy::HybridShard ? plan[3] : plan[2];
}

void check_model_fits(const config::TrainConfig& cfg, torch::Device device, int world_size, int local_size) {
  double available = 0;
  if (device.is_cuda()) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) available = double(total_bytes);
  } else {
    available = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  }
  if (available <= 0) return;
  const int sharing = device.is_cuda() ? 1 : std::max(1, std::min(local_size, world_size));
  // plan_memory counts parameters in int64, safe below 2^59 bytes of state; a model above
  // that exceeds any device whatever share of it a rank holds.
  const double whole = model::training_state_bytes(cfg.model);
  RankMemory row;
  row.parameters = whole;
  if (whole < 0x1p59) row = rank_memory(cfg, world_size, std::max(1, local_size), device.is_cpu());
  // A strategy train refuses at this size is refused where it is chosen, with its reason.
  if (!row.refused.empty()) return;
  check_memory_fits(cfg.model, row, world_size, sharing, available, device.str());
}

void check_memory_fits(const config::ModelConfig& model, const RankMemory& row, int world_size, int sharing,
                       double available, const std::string& where) {
  const model::StateBytes parts = model::training_state_parts(model);
  const double needed = row.peak() * double(sharing);
  if (needed <= available) return;
  std::string how;
  if (world_size > 1 || sharing > 1)
    how = fmt::format(
        " ({:.3g} GiB a rank{}{})", row.peak() / double(1 << 30),
        row.strategy.empty() ? "" : fmt::format(" under {} over {} ranks", row.strategy, world_size),
        sharing > 1 ? fmt::format(", and {} ranks share the memory", sharing) : "");
  // The key of the largest part is the one to name: 2M experts are moe_num_experts' doing,
  // whatever d_model is.
  std::string key, part;
  double largest = 0;
  if (parts.mlp >= parts.attention && parts.mlp >= parts.embedding) {
    largest = parts.mlp;
    part = "the MLPs";
    key = model.is_moe()          ? fmt::format("model.moe_num_experts {}", model.moe_num_experts)
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
      fmt::format("the model needs {:.3g} GiB for its weights, gradients and AdamW state alone, activations "
                  "aside{}; {} has "
                  "{:.3g} GiB; {} take {:.0f}% of the model",
                  needed / double(1 << 30), how, where, available / double(1 << 30), part,
                  100.0 * largest / parts.total()),
      fmt::format("{} (model.d_model {}, model.n_layers {})", key, model.d_model, model.n_layers),
      "make the model smaller (" + key.substr(0, key.find(' ')) + " first), or shard it over more devices");
}

}  // namespace siamese::train
