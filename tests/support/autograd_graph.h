#pragma once
// Whether an autograd graph holds a node of a given name (say "GroupedMmBackward0"): how a
// test tells which kernel a forward really took when several give the same numbers.
#include <torch/torch.h>

#include <memory>
#include <set>
#include <string>

namespace siamese::testing {

inline bool graph_has_node(const std::shared_ptr<torch::autograd::Node>& node, const std::string& name,
                           std::set<const torch::autograd::Node*>& seen) {
  if (!node || !seen.insert(node.get()).second) return false;
  if (node->name() == name) return true;
  for (const auto& edge : node->next_edges())
    if (graph_has_node(edge.function, name, seen)) return true;
  return false;
}

inline bool graph_has_node(const torch::Tensor& output, const std::string& name) {
  std::set<const torch::autograd::Node*> seen;
  return graph_has_node(output.grad_fn(), name, seen);
}

}  // namespace siamese::testing
