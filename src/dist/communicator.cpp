#include "siamese/dist/communicator.h"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "siamese/common/error.h"

namespace siamese::dist {
namespace {

// LibTorch's message without the C++ backtrace that c10::Error appends: the user needs the
// cause, not the frames of the library that saw it.
std::string message_of(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  if (const auto cut = text.find("\nException raised from"); cut != std::string::npos) text.resize(cut);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

}  // namespace

Communicator::Communicator(const World& world, torch::Device device, std::chrono::milliseconds timeout,
                           std::optional<Backend> backend)
    : world_(world),
      device_(device.is_cuda() ? device : torch::Device(torch::kCPU)),
      backend_(backend.value_or(device.is_cuda() ? Backend::Nccl : Backend::Gloo)),
      timeout_(timeout) {
  TORCH_CHECK(backend_ == Backend::Gloo || device_.is_cuda(), "Communicator: NCCL needs a CUDA device");
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(world.master_port);
  opts.isServer = world.is_main() && !world.agent_hosts_store;
  opts.numWorkers = world.size;
  opts.waitWorkers = false;
  opts.timeout = timeout;
  try {
    auto tcp = c10::make_intrusive<c10d::TCPStore>(world.master_addr, opts);
    // torchrun's agent store is shared with the agent's own keys: keep ours apart.
    store_ = c10::make_intrusive<c10d::PrefixStore>("siamese", tcp);
  } catch (const std::exception& e) {
    const std::string where = world.master_addr + ":" + std::to_string(world.master_port);
    const std::string cause = message_of(e);
    if (cause.find("EADDRINUSE") != std::string::npos)
      throw Error("rank 0 cannot host the rendezvous store: port " + where +
                      " is already in use (another run, or a rank of an earlier launch still running)",
                  "MASTER_PORT",
                  "launch with another port (scripts/torchrun --master_port P, or MASTER_PORT for srun), "
                  "or stop the process that holds it (ss -ltnp 'sport = :" +
                      std::to_string(world.master_port) + "' names it)");
    throw Error("cannot reach the rendezvous store at " + where + ": " + cause,
                "rank " + std::to_string(world.rank),
                "launch with scripts/torchrun (or srun with MASTER_ADDR/MASTER_PORT set) and "
                "check that every rank sees the same address");
  }
  connect();
}

Communicator::Communicator(World world, torch::Device device, Backend backend,
                           std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store)
    : world_(std::move(world)),
      device_(device),
      backend_(backend),
      timeout_(timeout),
      store_(std::move(store)) {
  connect();
}

std::unique_ptr<Communicator> Communicator::subgroup(const std::string& name,
                                                     const std::vector<int>& ranks) const {
  const auto me = std::find(ranks.begin(), ranks.end(), world_.rank);
  TORCH_CHECK(me != ranks.end(), "Communicator::subgroup: rank ", world_.rank, " is not in group ", name);
  World member = world_;
  member.rank = int(me - ranks.begin());
  member.size = int(ranks.size());
  auto store = c10::make_intrusive<c10d::PrefixStore>(name, store_);
  return std::unique_ptr<Communicator>(new Communicator(member, device_, backend_, timeout_, store));
}

void Communicator::connect() {
  mark_joined_ranks();
  if (device_.is_cuda()) c10::cuda::set_device(device_.index());
  if (backend_ == Backend::Nccl) {
    // NCCL binds a communicator to the current device; one GPU per rank (LOCAL_RANK).
    auto nccl_opts = c10d::ProcessGroupNCCL::Options::create();
    nccl_opts->timeout = timeout_;
    try {
      group_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, world_.rank, world_.size, nccl_opts);
    } catch (const std::exception& e) {
      fail_to_join(e);
    }
  } else {
    auto gloo_opts = c10d::ProcessGroupGloo::Options::create();
    gloo_opts->timeout = timeout_;
    gloo_opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    try {
      group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, world_.rank, world_.size, gloo_opts);
    } catch (const std::exception& e) {
      fail_to_join(e);
    }
  }
}

void Communicator::fail_to_join(const std::exception& e) const {
  const std::string cause = message_of(e);
  if (cause.find("timeout") == std::string::npos) fail(e, "connecting the process group");
  throw Error(
      fmt::format("not all {} ranks joined the process group within {} s ({})", world_.size,
                  timeout_.count() / 1000, cause),
      fmt::format("rank {} of {}", world_.rank, world_.size),
      fmt::format("start every rank (WORLD_SIZE={}: scripts/torchrun --nproc_per_node, srun -n) with "
                  "the same MASTER_ADDR and MASTER_PORT; a rank that failed before joining says why in "
                  "its own log; distributed.timeout_seconds sets the wait",
                  world_.size));
}

void Communicator::fail(const std::exception& e, const char* op) const {
  throw Error(std::string(op) + " failed: " + message_of(e),
              "rank " + std::to_string(world_.rank) + " of " + std::to_string(world_.size),
              "another rank probably died or stalled for longer than the timeout (" +
                  std::to_string(timeout_.count() / 1000) +
                  " s, distributed.timeout_seconds); check its log above");
}

c10::intrusive_ptr<c10d::Work> Communicator::all_reduce_sum_async(torch::Tensor& tensor) {
  std::vector<torch::Tensor> tensors{tensor};
  try {
    return group_->allreduce(tensors, c10d::AllreduceOptions{});
  } catch (const std::exception& e) {
    fail(e, "all-reduce");
  }
}

void Communicator::wait(const c10::intrusive_ptr<c10d::Work>& work) {
  try {
    work->wait(timeout_);
  } catch (const std::exception& e) {
    fail(e, "waiting for a collective");
  }
}

void Communicator::all_reduce_sum(torch::Tensor& tensor) { wait(all_reduce_sum_async(tensor)); }

c10::intrusive_ptr<c10d::Work> Communicator::reduce_scatter_sum_async(torch::Tensor& output,
                                                                      torch::Tensor& input) {
  try {
    return group_->_reduce_scatter_base(output, input, c10d::ReduceScatterOptions{});
  } catch (const std::exception& e) {
    fail(e, "reduce-scatter");
  }
}

c10::intrusive_ptr<c10d::Work> Communicator::all_gather_async(torch::Tensor& output, torch::Tensor& input) {
  try {
    return group_->_allgather_base(output, input, c10d::AllgatherOptions{});
  } catch (const std::exception& e) {
    fail(e, "all-gather");
  }
}

double Communicator::all_reduce_sum(double value) {
  auto t = torch::tensor({value}, torch::kFloat64).to(device_);
  all_reduce_sum(t);
  return t.item<double>();
}

double Communicator::all_reduce_max(double value) {
  auto t = torch::tensor({value}, torch::kFloat64).to(device_);
  std::vector<torch::Tensor> tensors{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  try {
    wait(group_->allreduce(tensors, opts));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(e, "all-reduce (max)");
  }
  return t.item<double>();
}

void Communicator::broadcast(torch::Tensor& tensor, int root) {
  std::vector<torch::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  try {
    wait(group_->broadcast(tensors, opts));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(e, "broadcast");
  }
}

void Communicator::barrier() {
  try {
    wait(group_->barrier(c10d::BarrierOptions{}));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(e, "barrier");
  }
}

}  // namespace siamese::dist
