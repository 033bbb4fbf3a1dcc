#pragma once
// The loss terms a training step reports, by the metrics row's key: "loss" (the mean
// cross-entropy) first, then "z_loss" with softmax_auxiliary_loss, then what the blocks'
// auxiliary losses add (aux_loss.h), each the mean over the global batch. The step keeps
// them on the device; the step reporter reads them in one copy and writes them by name.
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "siamese/dist/collectives.h"

namespace siamese::train {

class LossTerms {
 public:
  // Sums `value` (a scalar) into the term `name`, as float64, added in first-seen order.
  void add(const std::string& name, const torch::Tensor& value);
  // Sums every term over ranks, in one collective.
  void sum_over_ranks(dist::Collectives& ranks);
  // Whether every term is finite, a bool scalar on the device.
  torch::Tensor all_finite() const;
  // The terms in order, [size()] float64 on the device (empty: an undefined tensor).
  torch::Tensor stacked() const;
  // The term `name` on the device; undefined when the step had none.
  torch::Tensor operator[](const std::string& name) const;

  const std::vector<std::string>& names() const { return names_; }
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
  std::vector<torch::Tensor> values_;
};

// Host values of a step's terms, in the step's order.
using HostLossTerms = std::vector<std::pair<std::string, double>>;

}  // namespace siamese::train
