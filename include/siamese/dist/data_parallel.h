#pragma once
// ParallelPlan for a real multi-process run: a c10d process group (Gloo on CPU, NCCL on
// CUDA) and bucketed gradient all-reduce launched from autograd hooks.
#include <chrono>
#include <memory>

#include "siamese/dist/communicator.h"
#include "siamese/dist/grad_bucketer.h"
#include "siamese/dist/parallel_plan.h"

namespace siamese::dist {

struct DataParallelOptions {
  int64_t bucket_bytes = 25 << 20;  // PyTorch DDP's default bucket size
  bool overlap = true;              // start all-reduces during backward
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

class DataParallelPlan : public ParallelPlan {
 public:
  // Builds its own process group over `world`.
  DataParallelPlan(const World& world, torch::Device device, DataParallelOptions options);
  // Shares `comm` (which must outlive it): several syncs over one process group, as the
  // bench's overlapped and after-backward setups are.
  DataParallelPlan(Communicator& comm, DataParallelOptions options);
  // Over a world group built beforehand, which it then owns.
  DataParallelPlan(std::unique_ptr<Communicator> comm, DataParallelOptions options);

  int rank() const override { return comm_.rank(); }
  int world_size() const override { return comm_.size(); }
  int local_rank() const override { return comm_.world().local_rank; }
  int local_world_size() const override { return comm_.world().local_size; }
  void attach(const std::vector<torch::Tensor>& params) override;
  void before_backward(bool last_micro_batch) override;
  void after_backward() override;
  double sum(double value) override { return comm_.all_reduce_sum(value); }
  double max(double value) override { return comm_.all_reduce_max(value); }
  void sum_(torch::Tensor& tensor) override { comm_.all_reduce_sum(tensor); }
  void barrier() override { comm_.barrier(); }

  double take_comm_seconds() override;
  int64_t gradient_bytes(int64_t param_bytes) const override;
  std::string strategy() const override { return "ddp (full replicas)"; }

 private:
  std::unique_ptr<Communicator> owned_comm_;
  Communicator& comm_;
  DataParallelOptions options_;
  std::unique_ptr<GradBucketer> bucketer_;
};

}  // namespace siamese::dist
