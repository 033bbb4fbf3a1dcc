// `siamese inspect CONFIG [--dotted.key=value ...]`: the model a config builds, without
// building it: parameters per component, the topology's overhead over Pre-Norm with the
// same settings, and training FLOPs per token at max_sequence_length (block_type moe: the
// parameters one token uses, and FLOPs of those only).
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "siamese/model/accounting.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"

namespace siamese::cli {

void add_inspect_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("inspect", "Parameter counts per component, overhead vs pre, FLOPs");
  auto args = std::make_shared<ConfigArgs>();
  add_config_args(cmd, *args);
  cmd->callback([&run, args] {
    run = [args] {
      const ModelConfig cfg = load_run_config(*args).model;
      ModelConfig pre_cfg = cfg;
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
                       cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads.value_or(cfg.n_heads),
                       model::mlp_hidden_size(cfg), cfg.vocab_size, cfg.embedding_size)
                << "parameters:\n"
                << line("embedding", c.embedding, c.total()) << line("attention", c.attention, c.total())
                << line("mlp", c.mlp, c.total()) << line("residual-path norms", c.residual, c.total())
                << line("head", c.head, c.total()) << fmt::format("  {:<22}{:>15}\n", "total", c.total())
                << fmt::format("  {:<22}{:>15}\n", "non-embedding", c.total() - c.embedding)
                << (cfg.block_type == "moe"
                        ? fmt::format("  {:<22}{:>15}  ({} of {} experts per token{})\n", "active per token",
                                      c.active(), cfg.moe_top_k, cfg.moe_num_experts,
                                      cfg.moe_shared_expert ? " and the shared one" : "")
                        : "")
                << fmt::format("overhead vs pre: {:+} parameters ({:+.4f}%)\n", c.total() - pre.total(),
                               100.0 * double(c.total() - pre.total()) / double(pre.total()))
                << fmt::format("training FLOPs per token at seq {}: {:.4e} (6N + 12 L d T{})\n", T,
                               model::flops_per_token(cfg, T), cfg.block_type == "moe" ? ", active N" : "");
      return 0;
    };
  });
}

}  // namespace siamese::cli
