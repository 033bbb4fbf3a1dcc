#include "siamese/dist/data_parallel.h"

namespace siamese::dist {

DataParallelPlan::DataParallelPlan(const World& world, torch::Device device, DataParallelOptions options)
    : owned_comm_(std::make_unique<Communicator>(world, device, options.timeout)),
      comm_(*owned_comm_),
      options_(options) {}

DataParallelPlan::DataParallelPlan(Communicator& comm, DataParallelOptions options)
    : comm_(comm), options_(options) {}

DataParallelPlan::DataParallelPlan(std::unique_ptr<Communicator> comm, DataParallelOptions options)
    : owned_comm_(std::move(comm)), comm_(*owned_comm_), options_(options) {}

void DataParallelPlan::attach(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (auto p : params) comm_.broadcast(p);
  bucketer_ = std::make_unique<GradBucketer>(comm_, params, options_.bucket_bytes, options_.overlap);
}

void DataParallelPlan::before_backward(bool last_micro_batch) {
  TORCH_CHECK(bucketer_, "DataParallelPlan: attach() must come before training");
  bucketer_->prepare(last_micro_batch);
}

void DataParallelPlan::after_backward() { bucketer_->finish(); }

double DataParallelPlan::take_comm_seconds() {
  double s = bucketer_ ? bucketer_->blocked_seconds() : 0.0;
  if (bucketer_) bucketer_->reset_timers();
  return s;
}

// The gradients themselves (kept until the next step's zero_grad) and the buckets that sum them.
int64_t DataParallelPlan::gradient_bytes(int64_t param_bytes) const {
  return param_bytes + (bucketer_ ? bucketer_->buffer_bytes() : 0);
}

}  // namespace siamese::dist
