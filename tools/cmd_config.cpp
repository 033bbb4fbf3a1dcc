// `siamese config CONFIG [--dotted.key=value ...]`: print the fully resolved config as YAML
// (feeding it back yields the same config); `siamese config --schema`: the key reference.
// Also the CONFIG + overrides arguments every config-running subcommand shares.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/config/load.h"
#include "siamese/config/schema.h"
#include "siamese/model/registry.h"

namespace siamese::cli {

void add_config_args(CLI::App* cmd, ConfigArgs& args) {
  // Overrides are the subcommand's unrecognized arguments; option callbacks run once the
  // whole command line is parsed, so remaining() is complete here.
  cmd->add_option_function<std::string>(
         "config",
         [cmd, &args](const std::string& path) {
           args.path = path;
           args.overrides = cmd->remaining();
         },
         "YAML config (configs/tiny/base.yaml, configs/exps/...), then overrides in OLMo's "
         "dotted form: --model.d_model=256 --optimizer.learning_rate=2e-3")
      ->required();
  cmd->allow_extras();
}

TrainConfig load_run_config(const ConfigArgs& args) {
  ConfigOrigin origin;
  TrainConfig config = load_config(args.path, args.overrides, &origin);
  const auto& names = model::topology_names();
  if (std::find(names.begin(), names.end(), config.model.residual) == names.end()) {
    const std::string where = origin.topology == "MODEL_TYPE" ? "environment MODEL_TYPE"
                              : origin.topology == "default"  ? args.path
                                                              : origin.topology;
    throw Error("unknown topology \"" + config.model.residual + "\"", where + " (model.residual)",
                fmt::format("use one of: {}", fmt::join(names, ", ")));
  }
  for (const auto& key : model::settings_required_by(config.model.residual)) {
    const auto set = origin.explicit_keys.find(key);
    if (set != origin.explicit_keys.end() && !schema::train_field(key).ref<bool>(config))
      throw Error(fmt::format("topology {} (from {}) is defined with {} on, but it is set to false",
                              config.model.residual, origin.topology, key),
                  set->second + " (" + key + ")",
                  "remove the setting (the topology turns it on), or choose another topology");
  }
  model::apply_required_settings(config.model);
  model::check_model_config(config.model);
  spdlog::info("topology: {} (from {})", config.model.residual, origin.topology);
  return config;
}

void add_config_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("config", "Print the fully resolved config as YAML");
  auto args = std::make_shared<ConfigArgs>();
  add_config_args(cmd, *args);
  cmd->get_option("config")->required(false);
  auto schema_only = std::make_shared<bool>(false);
  cmd->add_flag("--schema", *schema_only, "Print every config key (type, default, meaning) as Markdown");
  cmd->callback([&run, args, schema_only] {
    run = [args, schema_only] {
      if (*schema_only) {
        std::cout << schema::markdown() << model::topologies_markdown();
        return 0;
      }
      if (args->path.empty())
        throw Error("no config file given", "command line", "run `siamese config configs/tiny/base.yaml`");
      const std::string yaml = to_yaml(load_run_config(*args));
      std::cout << yaml;
      return 0;
    };
  });
}

}  // namespace siamese::cli
