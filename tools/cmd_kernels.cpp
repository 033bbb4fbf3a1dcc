// `siamese kernels`: the custom kernels' op table on this machine's device, and with --check
// each row run against the ATen composite (kernels/op_table.h), as llama.cpp's
// test-backend-ops. A failing family is named on the last line, to switch off with
// model.kernels.<family>: aten.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <set>
#include <string>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/common/exit_codes.h"
#include "siamese/kernels/op_table.h"

namespace siamese::cli {
namespace {

int list_or_check(const std::string& device, bool check, bool timed) {
  if (device != "cpu" && device != "cuda")
    throw Error("--device " + device + " is neither cpu nor cuda", "--device",
                "pass --device cpu or --device cuda");
  const auto backend = device == "cuda" ? torch::kCUDA : torch::kCPU;
  if (check && backend == torch::kCUDA && !torch::cuda::is_available())
    throw Error("--check --device cuda and no CUDA device is visible", "--device",
                "run where a GPU is visible (nvidia-smi), or check --device cpu");
  const auto rows = kernels::op_table(backend);
  if (!check) {
    std::cout << fmt::format("{:<26} {:<9} {:<7} {}\n", "op", "dtype", "device", "family");
    for (const auto& r : rows)
      std::cout << fmt::format("{:<26} {:<9} {:<7} {}\n", kernels::op_name(r.op),
                               kernels::dtype_name(r.dtype), device,
                               kernels::family_name(kernels::family_of(r.op)));
    return 0;
  }
  std::cout << fmt::format("{:<26} {:<9} {:<7} {:<22} {:>10} {:>10} {:<5} {:>8}\n", "op", "dtype", "device",
                           "worst output", "max error", "tolerance", "", "vs ATen");
  std::set<std::string> failing;
  for (const auto& r : rows) {
    const kernels::RowCheck c = kernels::check_row(r, timed);
    const kernels::OutputCheck& w = c.worst();
    const std::string verdict = c.pass()            ? "pass"
                                : !c.raised.empty() ? "ERROR"
                                : !w.dtype_ok       ? "DTYPE"
                                : !w.shape_ok       ? "SHAPE"
                                                    : "FAIL";
    std::cout << fmt::format("{:<26} {:<9} {:<7} {:<22} {:>10.3g} {:>10.3g} {:<5} {:>8}\n",
                             kernels::op_name(r.op), kernels::dtype_name(r.dtype), device, w.name, w.error,
                             w.tolerance, verdict, timed ? fmt::format("{:.2f}x", c.speedup) : "-")
              << std::flush;
    if (!c.raised.empty()) std::cout << "  raised: " << c.raised << "\n" << std::flush;
    if (!c.pass()) failing.insert(kernels::family_name(kernels::family_of(r.op)));
  }
  std::cout << "failing families: " << (failing.empty() ? "none" : fmt::format("{}", fmt::join(failing, " ")))
            << "\n";
  return failing.empty() ? 0 : kExitFailedCheck;
}

}  // namespace

void add_kernels_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand(
      "kernels", "List the custom kernels' op x dtype rows for a device; --check runs each against ATen");
  auto device = std::make_shared<std::string>("cpu");
  auto check = std::make_shared<bool>(false);
  auto no_timing = std::make_shared<bool>(false);
  cmd->add_option("--device", *device, "cpu or cuda")->capture_default_str();
  cmd->add_flag("--check", *check,
                "Run every row: max error against a float64 ATen composite, its tolerance, pass or fail, and "
                "the forward's speed against the same op composed of ATen ops (exit 5 when a row fails)");
  cmd->add_flag("--no-timing", *no_timing, "With --check: leave out the speed column");
  cmd->callback([&run, device, check, no_timing] {
    run = [device, check, no_timing] { return list_or_check(*device, *check, !*no_timing); };
  });
}

}  // namespace siamese::cli
