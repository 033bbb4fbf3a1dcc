#pragma once
// ddp's gradient strategy over a c10d process group (Gloo on CPU, NCCL on CUDA): every rank
// keeps the whole model, and bucketed gradient all-reduces start from autograd hooks.
#include <chrono>
#include <memory>

#include "siamese/dist/communicator.h"
#include "siamese/dist/grad_bucketer.h"
#include "siamese/dist/gradient_strategy.h"

namespace siamese::dist {

struct DataParallelOptions {
  int64_t bucket_bytes = 25 << 20;  // PyTorch DDP's default bucket size
  bool overlap = true;              // start all-reduces during backward
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

class DataParallelGradients : public GradientStrategy {
 public:
  // Over `comm`, which must outlive it.
  DataParallelGradients(Communicator& comm, DataParallelOptions options) : comm_(comm), options_(options) {}

  void attach(const std::vector<torch::Tensor>& params) override;
  void set_requires_sync(bool sync) override;
  void finish() override;
  double take_comm_seconds() override;
  int64_t gradient_bytes(int64_t param_bytes) const override;
  std::string name() const override { return "ddp (full replicas)"; }

 private:
  Communicator& comm_;
  DataParallelOptions options_;
  std::unique_ptr<GradBucketer> bucketer_;
};

}  // namespace siamese::dist
