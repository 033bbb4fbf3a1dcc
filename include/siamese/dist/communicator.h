#pragma once
// The collective operations a data-parallel run needs, over a c10d process group:
// Gloo on CPU, NCCL on CUDA (device = LOCAL_RANK) unless told Gloo for CUDA tensors too.
// Failures of the other side (a rank that died, a timeout) surface as siamese::Error with a
// message that says what to check, so a broken job exits instead of hanging.
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include "siamese/dist/world.h"

namespace c10d {
class Store;
class Work;
}  // namespace c10d

namespace siamese::dist {

// NCCL wants a GPU of its own per rank. Gloo takes CPU tensors, and CUDA ones by copying
// them to pinned host memory and back on streams of its own, so ranks can share a GPU.
enum class Backend { Nccl, Gloo };

class Communicator {
 public:
  // Connects to the rendezvous store at world.master_addr:master_port and builds the
  // process group for `device`: `backend`, else NCCL for CUDA and Gloo for the CPU.
  // `timeout` bounds every collective and the rendezvous.
  Communicator(const World& world, torch::Device device, std::chrono::milliseconds timeout,
               std::optional<Backend> backend = std::nullopt);

  // The group of the world ranks `ranks` (this rank among them), named `name`: every member
  // passes the same name and list, and each rank builds only the groups it is in.
  std::unique_ptr<Communicator> subgroup(const std::string& name, const std::vector<int>& ranks) const;

  const World& world() const { return world_; }
  int rank() const { return world_.rank; }
  int size() const { return world_.size; }

  // Asynchronous in-place sum; wait() on the returned work (or call wait(work)).
  c10::intrusive_ptr<c10d::Work> all_reduce_sum_async(torch::Tensor& tensor);
  void wait(const c10::intrusive_ptr<c10d::Work>& work);

  void all_reduce_sum(torch::Tensor& tensor);
  // `input` holds size() equal chunks; rank r receives the sum of every rank's chunk r.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_sum_async(torch::Tensor& output, torch::Tensor& input);
  // `output` receives every rank's `input`, rank after rank.
  c10::intrusive_ptr<c10d::Work> all_gather_async(torch::Tensor& output, torch::Tensor& input);
  double all_reduce_sum(double value);
  double all_reduce_max(double value);
  void broadcast(torch::Tensor& tensor, int root = 0);
  void barrier();

 private:
  Communicator(World world, torch::Device device, Backend backend, std::chrono::milliseconds timeout,
               c10::intrusive_ptr<c10d::Store> store);
  void connect();
  [[noreturn]] void fail(const std::exception& e, const char* op) const;
  // Joining the group timed out or failed: a rank that was never started, or one that failed
  // before it joined, is the usual cause.
  [[noreturn]] void fail_to_join(const std::exception& e) const;

  World world_;
  torch::Device device_;  // where the group's tensors live: a CUDA device or the CPU
  Backend backend_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> group_;
};

}  // namespace siamese::dist
