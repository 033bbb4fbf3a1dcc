#include "siamese/model/activation_checkpoint.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "siamese/common/autocast.h"

namespace siamese::model {
namespace {

using torch::autograd::variable_list;

// The generator dropout draws from on `device`.
at::Generator generator_for(torch::Device device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device)
                          : at::detail::getDefaultCPUGenerator();
}

// The backward node of a checkpointed piece. It holds the piece's inputs, not its
// activations; apply() recomputes the piece under grad mode and back-propagates through
// it: the inputs' gradients are returned, the parameters' accumulate directly
// (a reentrant backward, as PyTorch's reentrant checkpoint does).
struct Recompute : torch::autograd::Node {
  TensorsFn fn;
  std::vector<torch::Tensor> inputs;  // detached
  std::vector<bool> input_requires_grad;
  torch::Device device{torch::kCPU};
  torch::Tensor rng_state;
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;

  variable_list apply(variable_list&& grads) override {
    std::vector<torch::Tensor> x;
    for (size_t i = 0; i < inputs.size(); ++i)
      x.push_back(inputs[i].detach().requires_grad_(input_requires_grad[i]));
    std::vector<torch::Tensor> out;
    {
      at::Generator gen = generator_for(device);
      const torch::Tensor now = gen.get_state();
      gen.set_state(rng_state);
      torch::AutoGradMode grad_mode(true);
      std::optional<AutocastGuard> amp;
      if (autocast) amp.emplace(device, autocast_dtype);
      out = fn(x);
      gen.set_state(now);
    }
    variable_list roots, root_grads;
    for (size_t i = 0; i < out.size(); ++i)
      if (grads[i].defined() && out[i].requires_grad()) {
        roots.push_back(out[i]);
        root_grads.push_back(grads[i]);
      }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    variable_list result;
    for (auto& t : x) result.push_back(t.requires_grad() ? t.grad() : torch::Tensor());
    return result;
  }

  void release_variables() override {
    inputs.clear();
    fn = nullptr;
  }
};

}  // namespace

std::vector<torch::Tensor> checkpointed(const std::vector<torch::Tensor>& inputs, TensorsFn fn) {
  if (!torch::GradMode::is_enabled()) return fn(inputs);
  auto node = std::shared_ptr<Recompute>(new Recompute(), torch::autograd::deleteNode);
  node->fn = fn;
  node->device = inputs.at(0).device();
  node->rng_state = generator_for(node->device).get_state();
  node->autocast = at::autocast::is_autocast_enabled(node->device.type());
  node->autocast_dtype = at::autocast::get_autocast_dtype(node->device.type());
  for (const auto& t : inputs) {
    node->inputs.push_back(t.detach());
    node->input_requires_grad.push_back(t.requires_grad());
  }
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));

  std::vector<torch::Tensor> out;
  {
    torch::NoGradGuard no_grad;
    out = fn(node->inputs);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    // An output that aliases an input (a stream the piece leaves alone) gets its own
    // storage, so the gradient edge set below belongs to it alone.
    bool aliases = out[i].is_view();
    for (const auto& in : node->inputs) aliases = aliases || out[i].is_alias_of(in);
    if (aliases) out[i] = out[i].clone();
    torch::autograd::set_history(out[i], node);
  }
  return out;
}

bool checkpoints_block(config::ActivationCheckpointing setting, int64_t layer) {
  switch (setting) {
    case config::ActivationCheckpointing::None:
      return false;
    case config::ActivationCheckpointing::WholeLayer:
      return true;
    case config::ActivationCheckpointing::OneInTwo:
      return layer % 2 == 0;
    case config::ActivationCheckpointing::OneInThree:
      return layer % 3 == 0;
    case config::ActivationCheckpointing::OneInFour:
      return layer % 4 == 0;
  }
  return false;
}

}  // namespace siamese::model
