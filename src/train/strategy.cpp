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
  if (cfg.distributed_strategy == "fsdp" && cfg.fsdp.sharding_strategy == "SHARD_GRAD_OP") {
    ShardedOptions options;
    options.bucket_bytes = bucket_bytes;
    options.overlap = cfg.distributed.overlap;
    options.timeout = timeout;
    if (cfg.fsdp.wrapping_strategy == "by_block")
      // Everything outside the blocks (embeddings, final norm, LM head) is one more unit.
      options.unit_of = [](const std::string& name) {
        return model::parse_param_name(name).layer.value_or(-1);
      };
    return std::make_unique<ShardedGradSync>(world, device, std::move(options));
  }
  DataParallelOptions options;
  options.bucket_bytes = bucket_bytes;
  options.overlap = cfg.distributed.overlap;
  options.timeout = timeout;
  return std::make_unique<DataParallelSync>(world, device, options);
}

}  // namespace siamese::train
