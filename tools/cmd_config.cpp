// `siamese config CONFIG [--dotted.key=value ...]`: print the fully resolved config as YAML
// (feeding it back yields the same config); `siamese config --schema`: the key reference.
// Also the CONFIG + overrides arguments every config-running subcommand shares.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "commands.h"
#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/common/user_path.h"
#include "siamese/config/load.h"
#include "siamese/config/schema.h"
#include "siamese/model/topology_table.h"

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

void write_output(const std::string& path, const std::string& text) {
  const auto folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) create_folder(folder, "the folder of " + path);
  write_file_atomically(path, text);
  spdlog::info("wrote {}", path);
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
        std::cout << config::schema::markdown() << model::topologies_markdown();
        return 0;
      }
      if (args->path.empty())
        throw Error("no config file given", "command line", "run `siamese config configs/tiny/base.yaml`");
      const std::string yaml = config::to_yaml(load_run_config(*args));
      std::cout << yaml;
      return 0;
    };
  });
}

}  // namespace siamese::cli
