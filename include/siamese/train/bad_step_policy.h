#pragma once
// What a run does after a step, from what the step left: its loss terms, its gradient norm and
// the loss scale it ran at. The device already cancelled a non-finite step's update; this
// decides whether the run goes on. An fp16 overflow while the loss scale settles is routine
// (skipped, not counted); any other non-finite step counts against max_bad_steps, and past it
// the run stops (OLMo-core's behaviour, with the skips it allows).
#include <cstdint>

namespace siamese::train {

class BadStepPolicy {
 public:
  enum class Verdict {
    Continue,  // a finite step
    Overflow,  // fp16 gradients overflowed at a loss scale that can still halve: skipped
    Skip,      // non-finite, counted, within max_bad_steps
    Stop       // non-finite past max_bad_steps
  };

  explicit BadStepPolicy(int64_t max_bad_steps) : max_bad_steps_(max_bad_steps) {}

  // `loss_scale` is 0 without dynamic loss scaling. `bad_steps` is the run's count so far
  // (checkpointed): a Skip adds one.
  Verdict judge(bool finite_loss, bool finite_grad, double loss_scale, int64_t& bad_steps) const {
    if (finite_loss && finite_grad) return Verdict::Continue;
    // With no scaling left (S <= 1) the gradients themselves overflow, and it is a bad step.
    if (finite_loss && loss_scale > 1) return Verdict::Overflow;
    if (bad_steps >= max_bad_steps_) return Verdict::Stop;
    bad_steps += 1;
    return Verdict::Skip;
  }
  int64_t max_bad_steps() const { return max_bad_steps_; }

 private:
  int64_t max_bad_steps_;
};

}  // namespace siamese::train
