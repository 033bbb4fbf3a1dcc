#include "siamese/train/parallelize.h"

#include <fmt/format.h>
#include <malloc.h>

#include <optional>

#include "siamese/common/autocast.h"
#include "siamese/common/error.h"

#include "siamese/dist/data_parallel.h"
#include "siamese/dist/sharded.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/topology_table.h"
#include "siamese/train/rank_agreement.h"
#include "siamese/train/runtime.h"

namespace siamese::train {

int hybrid_replicas(const config::ParallelSection& parallel, int world_size, int local_size) {
  const auto& asked = parallel.fsdp.hybrid_sharding_num_model_replicas;
  if (!asked && (local_size < 1 || world_size % local_size != 0))
    throw Error(
        fmt::format("HYBRID_SHARD shards within a node, and the launcher does not say how many of the "
                    "{} ranks share one ({})",
                    world_size,
                    local_size < 1
                        ? std::string("no LOCAL_WORLD_SIZE, no Slurm tasks per node")
                        : fmt::format("LOCAL_WORLD_SIZE, or Slurm's tasks per node, gave {}", local_size)),
        "fsdp.hybrid_sharding_num_model_replicas",
        "set fsdp.hybrid_sharding_num_model_replicas to the number of model copies");
  const int64_t replicas = asked ? *asked : world_size / local_size;
  if (world_size % replicas != 0)
    throw Error(fmt::format("{} model replicas do not split {} ranks evenly", replicas, world_size),
                "fsdp.hybrid_sharding_num_model_replicas", "use a divisor of the world size");
  return int(replicas);
}

bool reduces_during_backward(const config::ParallelSection& parallel) {
  return parallel.distributed.overlap &&
         parallel.activation_checkpointing == config::ActivationCheckpointing::None && !parallel.moe;
}

dist::ShardedOptions sharded_options(const config::ParallelSection& parallel, const dist::World& world) {
  dist::ShardedOptions options;
  options.bucket_bytes = static_cast<int64_t>(parallel.distributed.bucket_mb * (1 << 20));
  options.timeout = std::chrono::seconds(parallel.distributed.timeout_seconds);
  // FULL_SHARD gathers parameters a block at a time, so its units are the blocks whatever
  // the wrapping strategy says, and it keeps its own rule for overlapping, by block.
  options.shard_parameters = parallel.shards_parameters();
  if (parallel.fsdp.sharding_strategy == config::ShardingStrategy::HybridShard)
    options.replicas = hybrid_replicas(parallel, world.size, world.local_size);
  options.overlap =
      options.shard_parameters ? parallel.distributed.overlap : reduces_during_backward(parallel);
  if (parallel.fsdp.precision == config::FsdpPrecision::Pure)
    options.reduce_dtype = autocast_dtype(parallel.precision).value_or(torch::kFloat);
  if (parallel.fsdp.wrapping_strategy == config::WrappingStrategy::ByBlock || options.shard_parameters)
    // Everything outside the blocks (embeddings, final norm, LM head) is one more unit.
    options.unit_of = [](const std::string& name) {
      return model::parse_param_name(name).layer.value_or(-1);
    };
  return options;
}

void check_plan_fits_model(const config::ParallelSection& parallel) {
  const model::TopologySpec* topology = model::find_topology(parallel.residual);
  if (!topology || !topology->projects_weights || !parallel.shards_parameters()) return;
  throw Error(fmt::format("topology {} rewrites whole weight matrices after every step, and under "
                          "fsdp.sharding_strategy {} each rank holds only a flat shard of them",
                          parallel.residual, name_of(parallel.fsdp.sharding_strategy)),
              "fsdp.sharding_strategy", "use fsdp.sharding_strategy: SHARD_GRAD_OP");
}

std::optional<dist::Backend> comm_backend(const config::DistributedConfig& distributed,
                                          torch::Device device) {
  switch (distributed.backend) {
    case config::CommBackend::Gloo:
      return dist::Backend::Gloo;
    case config::CommBackend::Nccl:
      if (!device.is_cuda())
        throw Error("distributed.backend nccl needs a CUDA device per rank, and this run's device is the CPU",
                    "distributed.backend", "use distributed.backend: auto (Gloo on the CPU) or device: cuda");
      return dist::Backend::Nccl;
    case config::CommBackend::Auto:
      break;
  }
  return std::nullopt;
}

dist::ParallelPlan make_plan(const config::TrainConfig& cfg, const dist::World& world) {
  const config::ParallelSection parallel = config::parallel_section(cfg);
  check_plan_fits_model(parallel);
  const torch::Device device = resolve_device(cfg.device, world.local_rank);
  const bool sharded = parallel.shards_optimizer_state();
  // What a rank can refuse from its own config and launch comes before any connection.
  std::optional<dist::ShardedOptions> sharding;
  if (sharded) sharding = sharded_options(parallel, world);
  dist::DataParallelOptions options;
  options.bucket_bytes = static_cast<int64_t>(parallel.distributed.bucket_mb * (1 << 20));
  options.overlap = reduces_during_backward(parallel);
  options.timeout = std::chrono::seconds(parallel.distributed.timeout_seconds);
  // The ranks agree on every setting over the world group before a strategy builds groups of
  // its own (HYBRID_SHARD's shard and replica groups): ranks launched with different
  // strategies would otherwise wait in each other's group building until the timeout.
  auto comm = std::make_unique<dist::Communicator>(world, device, options.timeout,
                                                   comm_backend(parallel.distributed, device));
  {
    dist::GroupCollectives world_group(*comm);
    check_ranks_agree(world_group, cfg, device);
  }
  if (sharded) return dist::ParallelPlan::sharded(std::move(comm), std::move(*sharding));
  return dist::ParallelPlan::data_parallel(std::move(comm), options);
}

void parallelize(model::TransformerImpl& model, dist::ParallelPlan& plan) {
  plan.gradients().attach(model.parameters());
  model.set_block_runner(plan.blocks());
}

void hook_optimizer(Optimizer& optim, model::TransformerImpl& model, dist::ParallelPlan& plan) {
  dist::GradientStrategy& gradients = plan.gradients();
  optim.add_pre_step_hook([&gradients] { gradients.finish(); });
  optim.add_post_step_hook([&gradients] { gradients.after_update(); });
  // On the CPU, glibc keeps what a step frees inside its heap, in pieces that later
  // allocations of other sizes often cannot reuse, so a rank's resident memory creeps up
  // for many steps by an amount thread timing decides (measured: 2 FULL_SHARD ranks of 53M
  // parameters, +250 MiB over 12 steps). Handing the free pages back after each update
  // keeps it at what a step holds; the next step faults in what it needs again.
  const auto params = model.parameters();
  if (!params.empty() && params.front().device().is_cpu()) optim.add_post_step_hook([] { ::malloc_trim(0); });
  const model::TopologySpec* topology = model::find_topology(model.config().residual);
  if (!topology || !topology->projects_weights) return;
  optim.add_post_step_hook([&model, &gradients] {
    model.topology().project_weights(model);
    gradients.params_changed();
  });
}

}  // namespace siamese::train
