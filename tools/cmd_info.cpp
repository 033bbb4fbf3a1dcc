// `siamese info`: what this binary was built against and what it can use here.
#include <torch/torch.h>

#include <iostream>

#include "commands.h"
#include "siamese/common/build_info.h"

namespace siamese::cli {

void add_info_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("info", "Print versions (as --version), devices and threads");
  cmd->callback([&run] {
    run = [] {
      std::cout << build_info_text(build_info())
                << "cuda_available: " << (torch::cuda::is_available() ? "yes" : "no") << "\n"
                << "intra_op_threads: " << at::get_num_threads() << "\n";
      return 0;
    };
  });
}

}  // namespace siamese::cli
