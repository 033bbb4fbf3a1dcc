// `siamese coord-check CONFIG [--key=value ...]`: activation RMS across widths and depths after a
// few training steps (train/coord_check.h), the check that a parametrization transfers.
// Prints, per axis, each activation kind's RMS at every size and its log-log slope, at init and
// after the last step; --out writes every layer's value at every step as CSV.
#include <fmt/format.h>

#include <memory>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/train/coord_check.h"

namespace siamese::cli {

namespace {

struct CoordArgs {
  ConfigArgs config;
  std::vector<std::string> widths{"64", "128", "256", "512"}, depths{"4", "8", "16", "32"};
  train::CoordCheckOptions options;
  std::string out;
};

// "none" is no size; anything else a positive integer.
std::vector<int64_t> sizes_of(const std::vector<std::string>& items, const std::string& flag) {
  std::vector<int64_t> out;
  for (const auto& item : items) {
    if (item == "none") continue;
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (end == item.c_str() || *end != '\0' || v <= 0)
      throw Error("\"" + item + "\" is not a positive integer", flag,
                  "e.g. " + flag + " 64,128,256 (none: skip)");
    out.push_back(v);
  }
  return out;
}

void print_slopes(const std::vector<train::CoordPoint>& points, const train::CoordCheckOptions& o, int step) {
  for (const auto& [axis, sizes] :
       std::vector<std::pair<std::string, std::vector<int64_t>>>{{"width", o.widths}, {"depth", o.depths}}) {
    if (sizes.empty()) continue;
    std::vector<int64_t> sorted = sizes;
    std::sort(sorted.begin(), sorted.end());
    std::string header = fmt::format("{:<6} step {:<3} {:<10}", axis, step, "activation");
    for (int64_t s : sorted) header += fmt::format(" {:>10}", s);
    fmt::print("{}  {:>7}\n", header, "slope");
    for (const auto& s : train::coord_slopes(points, step)) {
      if (s.axis != axis) continue;
      std::string line = fmt::format("{:<6} step {:<3} {:<10}", axis, step, s.kind);
      for (double r : s.rms) line += fmt::format(" {:>10.4g}", r);
      fmt::print("{}  {:>7.3f}\n", line, s.slope);
    }
  }
}

}  // namespace

void add_coord_check_command(CLI::App& app, Handler& run) {
  auto args = std::make_shared<CoordArgs>();
  auto* cmd = app.add_subcommand(
      "coord-check",
      "Activation RMS across widths and depths after a few steps: does a parametrization transfer?");
  add_config_args(cmd, args->config);
  cmd->add_option("--widths", args->widths, "d_model values at the config's depth (none: skip)")
      ->delimiter(',');
  cmd->add_option("--depths", args->depths, "n_layers values at the config's width (none: skip)")
      ->delimiter(',');
  cmd->add_option("--steps", args->options.steps, "training steps at each size")->check(CLI::PositiveNumber);
  cmd->add_option("--out", args->out, "CSV of every layer's RMS at every step");
  cmd->callback([args, &run] {
    run = [args] {
      const config::TrainConfig cfg = load_run_config(args->config);
      args->options.widths = sizes_of(args->widths, "--widths");
      args->options.depths = sizes_of(args->depths, "--depths");
      fmt::print(
          "coord-check: {} with model.parametrization {}, lr {}, {} steps, base d_model {}, n_layers {}\n",
          cfg.model.residual, config::name_of(cfg.model.parametrization), cfg.optimizer.learning_rate,
          args->options.steps, cfg.model.mup.base_d_model.value_or(cfg.model.d_model),
          cfg.model.mup.base_n_layers.value_or(cfg.model.n_layers));
      const auto points = train::coord_check(cfg, args->options);
      print_slopes(points, args->options, 0);
      print_slopes(points, args->options, args->options.steps);
      if (!args->out.empty()) {
        std::string csv = "axis,size,step,site,rms\n";
        for (const auto& p : points)
          csv += fmt::format("{},{},{},{},{:.9g}\n", p.axis, p.size, p.step, p.site, p.rms);
        write_output(args->out, csv);
      }
      return 0;
    };
  });
}

}  // namespace siamese::cli
