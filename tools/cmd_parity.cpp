// `siamese parity GOLDEN_DIR [--tol 1e-4]`: load an official-code golden folder (config,
// weights under OLMo names, inputs, logits, loss, gradients, hidden states), run forward
// and backward in float32 and print the max relative error of every compared tensor.
// Exit code 1 when any exceeds the tolerance.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "siamese/model/parity.h"

namespace siamese::cli {

void add_parity_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("parity", "Compare the model with official-code golden tensors");
  auto dir = std::make_shared<std::string>();
  auto tol = std::make_shared<double>(1e-4);
  auto verbose = std::make_shared<bool>(false);
  cmd->add_option("golden_dir", *dir, "folder like ../shared/golden/hybrid_pre")->required();
  cmd->add_option("--tol", *tol, "max relative error (|ours - ref| / max|ref|)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--all", *verbose,
                "print every gradient, not only the worst, and the reference files not compared");
  cmd->callback([&run, dir, tol, verbose] {
    run = [dir, tol, verbose] {
      const auto result = model::run_parity(*dir);
      std::cout << fmt::format("{}: topology {}\n", *dir, result.topology);
      const model::ParityRow* worst_grad = nullptr;
      int bad = 0;
      for (const auto& r : result.rows) {
        const bool grad = r.name.rfind("grad ", 0) == 0;
        if (r.max_rel > *tol) ++bad;
        if (grad && (!worst_grad || r.max_rel > worst_grad->max_rel)) worst_grad = &r;
        if (!grad || *verbose || r.max_rel > *tol)
          std::cout << fmt::format("  {:<52} max_rel {:.3e}  max_abs {:.3e}{}\n", r.name, r.max_rel,
                                   r.max_abs, r.max_rel > *tol ? "  FAIL" : "");
      }
      if (worst_grad)
        std::cout << fmt::format("  gradients: {} compared, worst {} max_rel {:.3e}\n",
                                 std::count_if(result.rows.begin(), result.rows.end(),
                                               [](const auto& r) { return r.name.rfind("grad ", 0) == 0; }),
                                 worst_grad->name.substr(5), worst_grad->max_rel);
      // The official code saves intermediates this model has no point for (per-head tensors,
      // other topologies' streams); their names matter only to whoever extends the comparison.
      if (*verbose) {
        for (const auto& f : result.not_compared) std::cout << "  not compared: " << f << "\n";
      } else if (!result.not_compared.empty()) {
        std::cout << fmt::format(
            "  {} reference files have no counterpart here and were not compared "
            "(--all lists them)\n",
            result.not_compared.size());
      }
      std::cout << fmt::format("{} (worst max_rel {:.3e}, tolerance {:.1e})\n", bad ? "FAIL" : "PASS",
                               result.worst_rel(), *tol);
      return bad ? 1 : 0;
    };
  });
}

}  // namespace siamese::cli
