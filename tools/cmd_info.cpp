// `siamese info`: what this binary was built against and what it can use here.
#include <torch/torch.h>
#include <torch/version.h>

#include <iostream>

#include "commands.h"

namespace siamese::cli {

void add_info_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("info", "Print LibTorch version, devices and threads");
  cmd->callback([&run] {
    run = [] {
      std::cout << "libtorch: " << TORCH_VERSION << "\n"
                << "cuda_built: " << (torch::cuda::is_available() ? "yes" : "no") << "\n"
                << "cuda_devices: " << torch::cuda::device_count() << "\n"
                << "intra_op_threads: " << at::get_num_threads() << "\n";
      return 0;
    };
  });
}

}  // namespace siamese::cli
