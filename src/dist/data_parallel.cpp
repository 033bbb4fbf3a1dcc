#include "siamese/dist/data_parallel.h"

namespace siamese::dist {

void DataParallelGradients::attach(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (auto p : params) comm_.broadcast(p);
  bucketer_ = std::make_unique<GradBucketer>(comm_, params, options_.bucket_bytes, options_.overlap);
}

void DataParallelGradients::set_requires_sync(bool sync) {
  TORCH_CHECK(bucketer_, "DataParallelGradients: attach() must come before training");
  bucketer_->prepare(sync);
}

void DataParallelGradients::finish() { bucketer_->finish(); }

double DataParallelGradients::take_comm_seconds() {
  double s = bucketer_ ? bucketer_->blocked_seconds() : 0.0;
  if (bucketer_) bucketer_->reset_timers();
  return s;
}

// The gradients themselves (kept until the next step's zero_grad) and the buckets that sum them.
int64_t DataParallelGradients::gradient_bytes(int64_t param_bytes) const {
  return param_bytes + (bucketer_ ? bucketer_->buffer_bytes() : 0);
}

}  // namespace siamese::dist
