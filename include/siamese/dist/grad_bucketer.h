#pragma once
// Data-parallel gradient synchronisation with buckets launched from autograd hooks.
//
// Parameters are grouped, in reverse registration order (roughly the order backward
// produces their gradients), into buckets of about `bucket_bytes`. A post-hook on each
// parameter's gradient accumulator marks it ready; when every parameter of a bucket is
// ready, the bucket is flattened and its all-reduce starts while backward continues.
// finish() waits and writes the summed gradients back. Gradients are SUMMED over ranks:
// the trainer normalises each rank's loss by the token count of the whole global batch,
// so the sum is exactly the single-process gradient of that batch.
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "siamese/dist/communicator.h"

namespace siamese::dist {

class GradBucketer {
 public:
  // overlap=false launches every bucket in finish() instead (for measuring the overlap).
  GradBucketer(Communicator& comm, std::vector<torch::Tensor> params, int64_t bucket_bytes,
               bool overlap = true);
  ~GradBucketer();
  GradBucketer(const GradBucketer&) = delete;
  GradBucketer& operator=(const GradBucketer&) = delete;

  // Call before each micro-batch's backward: only the last micro-batch of an accumulation
  // communicates, earlier ones just accumulate locally.
  void prepare(bool sync);
  // After the last backward: completes every bucket and leaves summed grads in p.grad().
  void finish();

  // Seconds the caller spent blocked on communication in finish() since the last reset.
  double blocked_seconds() const { return blocked_seconds_; }
  void reset_timers() { blocked_seconds_ = 0; }
  int64_t buffer_bytes() const;

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    int64_t numel = 0;
    size_t pending = 0;
    torch::Tensor flat;
    c10::intrusive_ptr<c10d::Work> work;
  };
  void on_grad_ready(size_t param);
  void launch(Bucket& bucket);

  Communicator& comm_;
  std::vector<torch::Tensor> params_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  bool overlap_;
  bool sync_ = false;
  double blocked_seconds_ = 0;
};

}  // namespace siamese::dist
