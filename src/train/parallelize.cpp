#include "siamese/train/parallelize.h"

#include <fmt/format.h>

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

int hybrid_replicas(const config::TrainConfig& cfg, int world_size, int local_size) {
  const auto& asked = cfg.fsdp.hybrid_sharding_num_model_replicas;
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

bool reduces_during_backward(const config::TrainConfig& cfg) {
  return cfg.distributed.overlap &&
         cfg.model.activation_checkpointing == config::ActivationCheckpointing::None && !cfg.model.is_moe();
}

dist::ShardedOptions sharded_options(const config::TrainConfig& cfg, const dist::World& world) {
  dist::ShardedOptions options;
  options.bucket_bytes = static_cast<int64_t>(cfg.distributed.bucket_mb * (1 << 20));
  options.timeout = std::chrono::seconds(cfg.distributed.timeout_seconds);
  // FULL_SHARD gathers parameters a block at a time, so its units are the blocks whatever
  // the wrapping strategy says, and it keeps its own rule for overlapping, by block.
  options.shard_parameters = config::shards_parameters(cfg);
  if (cfg.fsdp.sharding_strategy == config::ShardingStrategy::HybridShard)
    options.replicas = hybrid_replicas(cfg, world.size, world.local_size);
  options.overlap = options.shard_parameters ? cfg.distributed.overlap : reduces_during_backward(cfg);
  if (cfg.fsdp.precision == config::FsdpPrecision::Pure)
    options.reduce_dtype = autocast_dtype(cfg.precision).value_or(torch::kFloat);
  if (cfg.fsdp.wrapping_strategy == config::WrappingStrategy::ByBlock || options.shard_parameters)
    // Everything outside the blocks (embeddings, final norm, LM head) is one more unit.
    options.unit_of = [](const std::string& name) {
      return model::parse_param_name(name).layer.value_or(-1);
    };
  return options;
}

void check_plan_fits_model(const config::TrainConfig& cfg) {
  const model::TopologySpec* topology = model::find_topology(cfg.model.residual);
  if (!topology || !topology->projects_weights || !config::shards_parameters(cfg)) return;
  throw Error(fmt::format("topology {} rewrites whole weight matrices after every step, and under "
                          "fsdp.sharding_strategy {} each rank holds only a flat shard of them",
                          cfg.model.residual, name_of(cfg.fsdp.sharding_strategy)),
              "fsdp.sharding_strategy", "use fsdp.sharding_strategy: SHARD_GRAD_OP");
}

std::unique_ptr<dist::ParallelPlan> make_plan(const config::TrainConfig& cfg, const dist::World& world) {
  check_plan_fits_model(cfg);
  const torch::Device device = resolve_device(cfg.device, world.local_rank);
  const bool sharded = config::shards_optimizer_state(cfg);
  // What a rank can refuse from its own config and launch comes before any connection.
  std::optional<dist::ShardedOptions> sharding;
  if (sharded) sharding = sharded_options(cfg, world);
  dist::DataParallelOptions options;
  options.bucket_bytes = static_cast<int64_t>(cfg.distributed.bucket_mb * (1 << 20));
  options.overlap = reduces_during_backward(cfg);
  options.timeout = std::chrono::seconds(cfg.distributed.timeout_seconds);
  // The ranks agree on every setting over the world group before a strategy builds groups of
  // its own (HYBRID_SHARD's shard and replica groups): ranks launched with different
  // strategies would otherwise wait in each other's group building until the timeout.
  auto comm = std::make_unique<dist::Communicator>(world, device, options.timeout);
  {
    dist::DataParallelPlan world_group(*comm, options);
    check_ranks_agree(world_group, cfg, device);
  }
  if (sharded) return std::make_unique<dist::ShardedPlan>(std::move(comm), std::move(*sharding));
  return std::make_unique<dist::DataParallelPlan>(std::move(comm), options);
}

void parallelize(model::TransformerImpl& model, dist::ParallelPlan& plan) {
  plan.attach(model.parameters());
  model.set_block_hooks(plan.block_hooks());
}

void hook_optimizer(Optimizer& optim, model::TransformerImpl& model, dist::ParallelPlan& plan) {
  optim.add_post_step_hook([&plan] { plan.after_update(); });
  optim.add_post_step_hook([&model, &plan] {
    model.topology().project_weights(model);
    plan.params_changed();
  });
}

}  // namespace siamese::train
