#include "siamese/train/strategy.h"

#include "siamese/dist/data_parallel.h"
#include "siamese/dist/sharded.h"
#include "siamese/model/olmo_names.h"
#include "siamese/train/runtime.h"

namespace siamese::train {

std::unique_ptr<GradientSync> make_strategy(const TrainConfig& cfg, const World& world) {
  const torch::Device device = resolve_device(cfg.device, world.local_rank);
  const auto bucket_bytes = static_cast<int64_t>(cfg.distributed.bucket_mb * (1 << 20));
  const std::chrono::milliseconds timeout = std::chrono::seconds(cfg.distributed.timeout_seconds);
  const std::string& sharding = cfg.fsdp.sharding_strategy;
  // With activation checkpointing every recomputed block back-propagates on its own, so a
  // parameter two blocks read (SiameseNorm's next-sublayer input norms) reports a gradient
  // once from each: a bucket counted complete at the first would be reduced without the
  // second. Those runs reduce after backward (FULL_SHARD keeps its own rule, by block).
  const bool overlap = cfg.distributed.overlap && cfg.model.activation_checkpointing.empty();
  if (cfg.distributed_strategy == "fsdp" && (sharding == "SHARD_GRAD_OP" || sharding == "FULL_SHARD")) {
    ShardedOptions options;
    options.bucket_bytes = bucket_bytes;
    // FULL_SHARD gathers parameters a block at a time, so its units are the blocks whatever
    // the wrapping strategy says.
    options.shard_parameters = sharding == "FULL_SHARD";
    options.overlap = options.shard_parameters ? cfg.distributed.overlap : overlap;
    options.timeout = timeout;
    options.blocks_recomputed = cfg.model.activation_checkpointing == "whole_layer";
    if (cfg.fsdp.wrapping_strategy == "by_block" || options.shard_parameters)
      // Everything outside the blocks (embeddings, final norm, LM head) is one more unit.
      options.unit_of = [](const std::string& name) {
        return model::parse_param_name(name).layer.value_or(-1);
      };
    return std::make_unique<ShardedGradSync>(world, device, std::move(options));
  }
  DataParallelOptions options;
  options.bucket_bytes = bucket_bytes;
  options.overlap = overlap;
  options.timeout = timeout;
  return std::make_unique<DataParallelSync>(world, device, options);
}

}  // namespace siamese::train
