// `siamese commcheck`: checks a distributed launch before a long run is queued behind it.
// Every rank joins the process group, verifies an all-reduce result and a broadcast, and
// rank 0 prints the all-reduce bus bandwidth for a tensor of the requested size.
//   scripts/torchrun --no_python --nproc_per_node 2 build/siamese commcheck
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

#include "commands.h"
#include "siamese/common/error.h"
#include "siamese/dist/communicator.h"

namespace siamese::cli {

void add_commcheck_command(CLI::App& app, Handler& run) {
  auto* cmd = app.add_subcommand("commcheck", "Check rendezvous, all-reduce and bandwidth of a launch");
  struct Args {
    double megabytes = 16;
    int iters = 10;
    int timeout_s = 60;
    std::string device = "cpu";
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--mb", args->megabytes, "all-reduce size in MiB (float32)")->check(CLI::PositiveNumber);
  cmd->add_option("--iters", args->iters, "timed all-reduces")->check(CLI::PositiveNumber);
  cmd->add_option("--timeout", args->timeout_s, "seconds before a missing rank is an error")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", args->device, "cpu (Gloo) or cuda (NCCL, device LOCAL_RANK)");
  cmd->callback([&run, args] {
    run = [args] {
      dist::World world = dist::detect_world();
      torch::Device device =
          args->device == "cuda" ? torch::Device(torch::kCUDA, world.local_rank) : torch::Device(torch::kCPU);
      dist::Communicator comm(world, device, std::chrono::seconds(args->timeout_s));

      auto mine = torch::full({4}, static_cast<double>(world.rank + 1),
                              torch::TensorOptions().dtype(torch::kFloat64).device(device));
      comm.all_reduce_sum(mine);
      double expected = world.size * (world.size + 1) / 2.0;
      if (mine.cpu()[0].item<double>() != expected) {
        throw Error("all-reduce returned " + std::to_string(mine.cpu()[0].item<double>()) + ", expected " +
                        std::to_string(expected),
                    "rank " + std::to_string(world.rank));
      }
      auto token = torch::full({1}, world.is_main() ? 42.0 : 0.0,
                               torch::TensorOptions().dtype(torch::kFloat64).device(device));
      comm.broadcast(token);
      if (token.cpu().item<double>() != 42.0) {
        throw Error("broadcast from rank 0 did not arrive", "rank " + std::to_string(world.rank));
      }

      int64_t numel = static_cast<int64_t>(args->megabytes * (1 << 20) / 4);
      auto buf = torch::ones({numel}, torch::TensorOptions().device(device));
      comm.all_reduce_sum(buf);  // warm-up: connections and buffers
      comm.barrier();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < args->iters; ++i) comm.all_reduce_sum(buf);
      if (device.is_cuda()) torch::cuda::synchronize();
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double per_op = secs / std::max(1, args->iters);
      // Bus bandwidth as nccl-tests defines it: bytes * 2(n-1)/n per all-reduce.
      double bus = numel * 4.0 * 2.0 * (world.size - 1) / std::max(1, world.size) / per_op / 1e9;
      spdlog::info(
          "commcheck: world {} ({}), all-reduce ok, broadcast ok; {:.1f} MiB all-reduce "
          "{:.2f} ms, bus bandwidth {:.2f} GB/s",
          world.size, world.launcher, args->megabytes, per_op * 1e3, bus);
      return 0;
    };
  });
}

}  // namespace siamese::cli
