#pragma once
// Runs a callback when autograd has accumulated a parameter's gradient: a post-hook on the
// parameter's gradient accumulator, the point at which its gradient for this backward is
// final (every use of a shared parameter summed), so communication of it can start.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <functional>
#include <utility>

namespace siamese::dist {

class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace siamese::dist
