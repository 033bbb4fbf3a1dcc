#pragma once
// How a run's gradients become the sum over ranks, and what that costs in memory. A strategy
// installs its own autograd hooks when attached (communication starts during backward) and
// waits for the rest in finish(), which train/parallelize.cpp registers as an optimizer
// pre-step hook: the step itself calls no communication. This base class is one process:
// the gradients are already the sum.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace siamese::dist {

class GradientStrategy {
 public:
  virtual ~GradientStrategy() = default;
  // Makes every rank's parameters equal rank 0's and installs the hooks that communicate
  // during backward. Called once, before training.
  virtual void attach(const std::vector<torch::Tensor>& params) {}
  // Before each micro-batch's backward: false for all but a step's last, whose backward alone
  // communicates (earlier ones accumulate locally), as FSDP2's set_requires_gradient_sync.
  virtual void set_requires_sync(bool sync) {}
  // After the last backward of a step: leaves the summed gradients where the optimizer reads
  // them.
  virtual void finish() {}
  // Seconds the last step spent blocked on gradient communication (metrics' comm_share).
  virtual double take_comm_seconds() { return 0; }
  // After the optimizer updated its parameters: makes every parameter whole again.
  virtual void after_update() {}
  // The whole parameters were overwritten (a checkpoint loaded, nGPT's projection): a
  // sharded strategy's shards take their values again.
  virtual void params_changed() {}
  // Bytes this rank keeps between steps for gradients and their communication buffers, for
  // parameters of `param_bytes`: one process keeps a gradient per parameter.
  virtual int64_t gradient_bytes(int64_t param_bytes) const { return param_bytes; }
  // Bytes this rank keeps between steps for parameters of `param_bytes` in all, master
  // copies included.
  virtual int64_t parameter_bytes(int64_t param_bytes) const { return param_bytes; }
  // Every rank calls these around reading the whole parameters outside a forward (rank 0
  // writing the model's checkpoint): the first makes them whole, the second lets the
  // strategy drop what it does not keep.
  virtual void make_params_whole() {}
  virtual void release_params() {}
  // The strategy in words, for the start-up log.
  virtual std::string name() const { return "one process"; }
};

// The parameters whole for the length of a scope, on every rank (see make_params_whole).
class WholeParams {
 public:
  explicit WholeParams(GradientStrategy& gradients) : gradients_(gradients) {
    gradients_.make_params_whole();
  }
  ~WholeParams() { gradients_.release_params(); }
  WholeParams(const WholeParams&) = delete;
  WholeParams& operator=(const WholeParams&) = delete;

 private:
  GradientStrategy& gradients_;
};

}  // namespace siamese::dist
