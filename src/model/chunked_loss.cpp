// The chunked LM-head loss (lm_loss.h: chunked_loss_sums). The [tokens, vocabulary] logits,
// their softmax and its gradient are the largest tensors of a small model's training step;
// here they exist one chunk at a time.
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <unordered_set>

#include "siamese/common/autocast.h"
#include "siamese/model/lm_loss.h"

namespace siamese::model {
namespace {

using torch::autograd::variable_list;

// The leaves that require grad in `out`'s graph: the parameters a function of detached
// inputs read.
std::vector<torch::Tensor> leaves_of(const torch::Tensor& out) {
  std::vector<torch::Tensor> leaves;
  std::vector<torch::autograd::Node*> todo;
  std::unordered_set<torch::autograd::Node*> seen;
  if (out.grad_fn()) todo.push_back(out.grad_fn().get());
  while (!todo.empty()) {
    auto* node = todo.back();
    todo.pop_back();
    if (!seen.insert(node).second) continue;
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) leaves.push_back(acc->variable);
    for (const auto& edge : node->next_edges())
      if (edge.function) todo.push_back(edge.function.get());
  }
  return leaves;
}

// The backward of chunked_loss_sums. Its outputs are the sums (nll, then z when on); it
// holds the head's input and the targets, not logits. apply() recomputes each chunk's loss
// under grad mode (and the forward's autocast state) and differentiates it with
// autograd::grad, which returns gradients instead of accumulating them: the parameters'
// gradients leave through this node's edges once, summed over chunks, so gradient hooks
// (data parallelism's buckets) fire once per parameter, and a tied embedding's two
// gradients meet in one accumulation as in the unchunked graph.
struct ChunkedLossBackward : torch::autograd::Node {
  HeadFn head;
  torch::Tensor hidden;   // [rows, d], detached
  torch::Tensor targets;  // [rows]
  bool hidden_requires_grad = false;
  std::vector<torch::Tensor> params;
  std::optional<double> z_loss_multiplier;
  int64_t chunk = 0;
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;

  std::string name() const override { return "ChunkedLossBackward"; }

  variable_list apply(variable_list&& grads) override {
    const torch::Tensor grad_nll = grads.at(0);
    const torch::Tensor grad_z = grads.size() > 1 ? grads[1] : torch::Tensor();
    variable_list result(1 + params.size());
    if (!grad_nll.defined() && !grad_z.defined()) return result;
    if (hidden_requires_grad) result[0] = torch::zeros_like(hidden);
    torch::AutoGradMode grad_mode(true);
    std::optional<AutocastGuard> amp;
    if (autocast) amp.emplace(hidden.device(), autocast_dtype);
    const int64_t rows = hidden.size(0);
    for (int64_t start = 0; start < rows; start += chunk) {
      const int64_t n = std::min(chunk, rows - start);
      const auto x = hidden.narrow(0, start, n).detach().requires_grad_(hidden_requires_grad);
      const LossSums sums = loss_sums(head(x), targets.narrow(0, start, n), z_loss_multiplier);
      variable_list roots, root_grads, inputs;
      if (grad_nll.defined()) {
        roots.push_back(sums.nll);
        root_grads.push_back(grad_nll);
      }
      if (grad_z.defined()) {
        roots.push_back(sums.z);
        root_grads.push_back(grad_z);
      }
      if (hidden_requires_grad) inputs.push_back(x);
      inputs.insert(inputs.end(), params.begin(), params.end());
      const auto g = torch::autograd::grad(roots, inputs, root_grads, /*retain_graph=*/false,
                                           /*create_graph=*/false, /*allow_unused=*/true);
      size_t k = 0;
      if (hidden_requires_grad) result[0].narrow(0, start, n).copy_(g[k++]);
      for (size_t i = 0; i < params.size(); ++i, ++k) {
        if (!g[k].defined()) continue;
        if (result[1 + i].defined())
          result[1 + i].add_(g[k]);
        else
          result[1 + i] = g[k];
      }
    }
    return result;
  }

  void release_variables() override {
    head = nullptr;
    hidden.reset();
    targets.reset();
    params.clear();
  }
};

}  // namespace

LossSums chunked_loss_sums(const HeadFn& head, const torch::Tensor& hidden, const torch::Tensor& targets,
                           std::optional<double> z_loss_multiplier, int64_t chunk_tokens) {
  TORCH_CHECK(chunk_tokens > 0, "chunked_loss_sums: chunk_tokens must be positive, got ", chunk_tokens);
  const auto flat = hidden.reshape({-1, hidden.size(-1)});
  const auto flat_targets = targets.reshape({-1});
  const int64_t rows = flat.size(0);
  TORCH_CHECK(flat_targets.size(0) == rows, "chunked_loss_sums: ", rows, " hidden rows but ",
              flat_targets.size(0), " targets");
  if (rows == 0) return loss_sums(head(flat), flat_targets, z_loss_multiplier);

  // The parameters head() reads, from the graph of one row's logits.
  std::vector<torch::Tensor> params;
  if (torch::GradMode::is_enabled()) params = leaves_of(head(flat.narrow(0, 0, 1).detach()));
  const bool differentiable = flat.requires_grad() || !params.empty();

  LossSums sums;
  {
    torch::NoGradGuard no_grad;
    const auto detached = flat.detach();
    for (int64_t start = 0; start < rows; start += chunk_tokens) {
      const int64_t n = std::min(chunk_tokens, rows - start);
      const LossSums part =
          loss_sums(head(detached.narrow(0, start, n)), flat_targets.narrow(0, start, n), z_loss_multiplier);
      sums.nll = sums.nll.defined() ? sums.nll + part.nll : part.nll;
      if (part.z.defined()) sums.z = sums.z.defined() ? sums.z + part.z : part.z;
    }
  }
  if (!differentiable) return sums;

  auto node = std::shared_ptr<ChunkedLossBackward>(new ChunkedLossBackward(), torch::autograd::deleteNode);
  node->head = head;
  node->hidden = flat.detach();
  node->targets = flat_targets;
  node->hidden_requires_grad = flat.requires_grad();
  node->params = params;
  node->z_loss_multiplier = z_loss_multiplier;
  node->chunk = chunk_tokens;
  node->autocast = at::autocast::is_autocast_enabled(flat.device().type());
  node->autocast_dtype = at::autocast::get_autocast_dtype(flat.device().type());
  std::vector<torch::Tensor> edges_from{flat};
  edges_from.insert(edges_from.end(), params.begin(), params.end());
  node->set_next_edges(torch::autograd::collect_next_edges(edges_from));
  torch::autograd::set_history(sums.nll, node);
  if (sums.z.defined()) torch::autograd::set_history(sums.z, node);
  return sums;
}

}  // namespace siamese::model
