#pragma once
// Checkpointed state that a component owns and names itself, as torchtitan's Stateful: the
// checkpoint writes every tracked component's entries into train_state.pt (the scalars also
// into train_state.json) and hands them back on load. New state (an EMA of the weights, a
// data mixture's position, router biases) is one more component the checkpoint manager
// tracks, not a change to TrainState, save, load and the trainer.
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace siamese::train {

// Named tensors in the order they are written; the names share one namespace per checkpoint.
using StateDict = std::vector<std::pair<std::string, torch::Tensor>>;

class Stateful {
 public:
  virtual ~Stateful() = default;
  virtual StateDict state_dict() const = 0;
  // `state` holds every entry of the checkpoint. One from before the component existed
  // lacks its entries: the component keeps what it has then.
  virtual void load_state_dict(const StateDict& state) = 0;
};

// The entry `key` of `state`, or an undefined tensor.
inline torch::Tensor state_entry(const StateDict& state, const std::string& key) {
  for (const auto& [name, value] : state)
    if (name == key) return value;
  return {};
}

}  // namespace siamese::train
