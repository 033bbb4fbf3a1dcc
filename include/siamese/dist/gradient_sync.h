#pragma once
// The trainer's only contact with data parallelism. Each rank normalises its loss by the
// token count of the whole global batch, so SUMMING gradients over ranks gives exactly the
// single-process gradient. This base class is the world of one: every call is a no-op.
// A distributed run passes a subclass (e.g. one driving dist/grad_bucketer.h) to train().
#include <torch/torch.h>

namespace siamese {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  // Index of this rank on its node: its CUDA device.
  virtual int local_rank() const { return 0; }
  // Called before each micro-batch's backward; only the last one of a step needs to
  // communicate (earlier ones accumulate locally).
  virtual void before_backward(bool last_micro_batch) {}
  // Called after the last backward of a step: leave the summed gradients in p.grad().
  virtual void after_backward() {}
  // Seconds the last step spent blocked on gradient communication (metrics' comm_share).
  virtual double take_comm_seconds() { return 0; }
  // Sums of per-rank scalars (loss, token counts, eval sums).
  virtual double sum(double value) { return value; }
  // In-place sum of a tensor on the training device over ranks (no host sync on CUDA).
  virtual void sum_(torch::Tensor& tensor) {}
  // Makes every rank's parameters equal rank 0's and takes charge of their gradients
  // (hooks that start communication during backward). Called once, before training.
  virtual void attach(const std::vector<torch::Tensor>& params) {}
  // Every rank waits here until all arrive (e.g. while rank 0 writes a checkpoint).
  virtual void barrier() {}
};

}  // namespace siamese
