// `siamese inspect CONFIG [--dotted.key=value ...]`: the model a config builds, without
// building it: parameters per component, the topology's overhead over Pre-Norm with the
// same settings, and training FLOPs per token at max_sequence_length (block_type moe: the
// parameters one token uses, and FLOPs of those only); with --world-size, what each rank
// holds under each data-parallel strategy (train/memory_plan.h).
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "commands.h"
#include "siamese/config/device.h"
#include "siamese/config/validate.h"
#include "siamese/model/accounting.h"
#include "siamese/model/attention.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "siamese/train/memory_plan.h"
#include "siamese/train/parallelize.h"

namespace siamese::cli {
namespace {

void print_memory_plan(const config::TrainConfig& cfg, int world, int local_world) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const int64_t micro = std::min(cfg.device_train_microbatch_size, cfg.global_train_batch_size / world);
  // The device the config asks for (auto: what this machine has), whose collectives (Gloo or
  // NCCL) set the buffers; `--device=cuda` plans for GPUs on a machine without one.
  const auto kind = cfg.device.kind();
  const bool on_cpu = kind == config::DeviceSetting::Kind::Cpu ||
                      (kind == config::DeviceSetting::Kind::Auto && !torch::cuda::is_available());
  std::cout << fmt::format(
      "per-rank memory, GiB, {} ranks ({} per node) on {}, micro-batch {} x {} tokens, float32 weights and "
      "AdamW:\n",
      world, std::min(world, local_world), on_cpu ? "the CPU (Gloo)" : "CUDA (NCCL)", micro,
      cfg.model.max_sequence_length);
  std::cout << fmt::format("  {:<16}{:>9}{:>9}{:>9}{:>9}{:>9}{:>9}{:>12}{:>12}{:>9}{:>12}\n", "strategy",
                           "params", "grads", "optim", "state", "in step", "peak", "activ.", "activ.ckpt",
                           "total", "total ckpt");
  for (const auto& r : train::plan_memory(cfg, world, local_world, on_cpu)) {
    if (!r.refused.empty()) {
      std::cout << fmt::format("  {:<16}refused by train: {}\n", r.strategy, r.refused);
      continue;
    }
    std::cout << fmt::format(
        "  {:<16}{:>9.2f}{:>9.2f}{:>9.2f}{:>9.2f}{:>9.2f}{:>9.2f}{:>12.2f}{:>12.2f}{:>9.2f}{:>12.2f}\n",
        r.strategy, r.parameters / gib, r.gradients / gib, r.optimizer / gib, r.state() / gib,
        r.in_step / gib, r.peak() / gib, r.activations / gib, r.activations_checkpointed / gib,
        (r.peak() + r.activations) / gib, (r.peak() + r.activations_checkpointed) / gib);
  }
  std::cout << "  state: kept between steps; peak: state and a step's gradient buffers, which train checks "
               "against the memory; total: peak and activations (ckpt: with activation checkpointing)\n";
}

}  // namespace

void add_inspect_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("inspect", "Parameter counts per component, overhead vs pre, FLOPs");
  auto args = std::make_shared<ConfigArgs>();
  auto world = std::make_shared<int>(0);
  auto local_world = std::make_shared<int>(8);
  auto* world_option =
      cmd->add_option("--world-size", *world, "Also print each rank's memory under each strategy for N ranks")
          ->check(CLI::PositiveNumber);
  // Without a world size no plan is printed, so a node size alone would be dropped unread.
  cmd->add_option("--local-world-size", *local_world, "Ranks per node (HYBRID_SHARD shards within one)")
      ->check(CLI::PositiveNumber)
      ->needs(world_option);
  add_config_args(cmd, *args);
  cmd->callback([&run, args, world, local_world] {
    run = [args, world, local_world] {
      const config::TrainConfig train_cfg = load_run_config(*args);
      const config::ModelConfig& cfg = train_cfg.model;
      config::ModelConfig pre_cfg = cfg;
      pre_cfg.residual = "pre";
      const auto c = model::count_parameters(cfg);
      const auto pre = model::count_parameters(pre_cfg);
      const int64_t T = cfg.max_sequence_length;
      auto line = [](const char* what, int64_t n, int64_t total) {
        return fmt::format("  {:<22}{:>15}  {:6.2f}%\n", what, n, 100.0 * double(n) / double(total));
      };
      std::cout << fmt::format("topology: {}  ({})\n", cfg.residual,
                               model::topology_description(cfg.residual))
                << fmt::format(
                       "d_model {}  n_layers {}  n_heads {}  n_kv_heads {}  mlp hidden {}  vocab {} "
                       "(embedding {})\n",
                       cfg.d_model, cfg.n_layers, cfg.n_heads, model::kv_head_count(cfg),
                       model::mlp_hidden_size(cfg), cfg.vocab_size, cfg.embedding_size)
                << "parameters:\n"
                << line("embedding", c.embedding, c.total()) << line("attention", c.attention, c.total())
                << line("mlp", c.mlp, c.total()) << line("residual-path norms", c.residual, c.total())
                << line("head", c.head, c.total()) << fmt::format("  {:<22}{:>15}\n", "total", c.total())
                << fmt::format("  {:<22}{:>15}\n", "non-embedding", c.total() - c.embedding)
                << (cfg.is_moe()
                        ? fmt::format("  {:<22}{:>15}  ({} of {} experts per token{})\n", "active per token",
                                      c.active(), cfg.moe_top_k, cfg.moe_num_experts,
                                      cfg.moe_shared_expert ? " and the shared one" : "")
                        : "")
                << fmt::format("overhead vs pre: {:+} parameters ({:+.4f}%)\n", c.total() - pre.total(),
                               100.0 * double(c.total() - pre.total()) / double(pre.total()))
                << fmt::format("training FLOPs per token at seq {}: {:.4e} (6N + 12 L d T{})\n", T,
                               model::flops_per_token(cfg, T), cfg.is_moe() ? ", active N" : "");
      if (*world > 0) {
        // A plan for a launch that train would refuse is no plan.
        config::validate_for_world_size(train_cfg, *world);
        train::check_plan_fits_model(config::parallel_section(train_cfg));
        if (train_cfg.fsdp.sharding_strategy == config::ShardingStrategy::HybridShard &&
            train_cfg.distributed_strategy == config::DistributedStrategy::Fsdp)
          train::hybrid_replicas(config::parallel_section(train_cfg), *world, std::min(*world, *local_world));
        print_memory_plan(train_cfg, *world, *local_world);
      }
      return 0;
    };
  });
}

}  // namespace siamese::cli
