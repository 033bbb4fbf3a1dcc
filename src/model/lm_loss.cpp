#include "siamese/model/lm_loss.h"

#include "siamese/kernels/cross_entropy.h"

namespace siamese::model {

namespace {

// The cross-entropy and z-loss sums of logits rows [N, V] as one autograd node. The
// vocabulary-wide work is the softmax's statistics in forward and, in backward, one exp and
// one scale, where cross_entropy's backward fills a zero [N, V] gradient, scatters into it
// and runs log_softmax's backward over both (bench --profile: a tenth of the CPU step on
// base.yaml). Both are passes of kernels/cross_entropy.h, on the CPU and on CUDA, which read
// and write half logits and their gradient without float32 copies. Forward keeps two floats a
// row, not the [N, V] log-probabilities (a logits-sized buffer less at the peak), and backward
// recomputes them from the logits, bit for bit. Other dtypes (float64, and float16 on the CPU,
// widened to float32 first) take LibTorch's log_softmax. The logsumexp the z-loss needs is
// logit - log-probability at the target, not a second pass over the row. Value and gradient
// are cross_entropy's to rounding (tests/model/lm_loss_test.cpp).
class CrossEntropySums : public torch::autograd::Function<CrossEntropySums> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& rows, const torch::Tensor& targets,
                                                std::optional<double> z) {
    const auto index = targets.unsqueeze(1);
    torch::Tensor saved_rows, stats, picked;
    if (kernels::cross_entropy_supports(rows)) {
      saved_rows = rows.contiguous();
      stats = kernels::log_softmax_stats(saved_rows);
      picked = (saved_rows.gather(1, index).to(torch::kFloat) - stats[0]) - stats[1];
    } else {
      saved_rows = torch::log_softmax(rows, 1);
      picked = saved_rows.gather(1, index);
    }
    torch::autograd::variable_list out = {-picked.sum()};
    torch::Tensor lse;
    if (z) {
      lse = rows.gather(1, index).to(picked.scalar_type()) - picked;
      out.push_back(*z * lse.pow(2).sum());
    }
    ctx->save_for_backward({saved_rows, index, lse, stats});
    ctx->saved_data["z"] = z.value_or(0.0);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &rows_or_log_probs = saved[0], &index = saved[1], &lse = saved[2], &stats = saved[3];
    const auto g_nll = grads[0].defined() ? grads[0] : torch::zeros({}, rows_or_log_probs.options());
    const bool z_grad = lse.defined() && grads.size() > 1 && grads[1].defined();
    const auto row_scale = z_grad ? g_nll + 2 * ctx->saved_data["z"].toDouble() * grads[1] * lse : g_nll;
    if (!stats.defined()) {
      auto grad = rows_or_log_probs.exp().mul_(row_scale);
      grad.scatter_add_(1, index, (-g_nll).expand({index.size(0), 1}).to(grad.scalar_type()));
      return {grad, torch::Tensor(), torch::Tensor()};
    }
    const auto grad =
        kernels::cross_entropy_grad(rows_or_log_probs, stats, row_scale.reshape({-1, 1}), index, g_nll);
    return {grad, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

LossSums loss_sums(const torch::Tensor& logits, const torch::Tensor& targets,
                   std::optional<double> z_loss_multiplier) {
  const bool as_is = logits.scalar_type() == torch::kFloat64 || kernels::cross_entropy_supports(logits);
  const auto wide = as_is ? logits : logits.to(torch::kFloat32);
  const auto sums = CrossEntropySums::apply(wide.reshape({-1, wide.size(-1)}),
                                            targets.reshape({-1}).contiguous(), z_loss_multiplier);
  return {sums[0], sums.size() > 1 ? sums[1] : torch::Tensor()};
}

LossSums head_loss_sums(TransformerImpl& model, const torch::Tensor& hidden, const torch::Tensor& targets,
                        std::optional<double> z_loss_multiplier) {
  const auto& c = model.config();
  if (!c.fused_loss.value_or(false)) return loss_sums(model.head(hidden), targets, z_loss_multiplier);
  // The backward keeps this function: the model outlives every backward of its losses.
  return chunked_loss_sums([&model](const torch::Tensor& h) { return model.head(h); }, hidden, targets,
                           z_loss_multiplier, c.fused_loss_chunk_tokens);
}

torch::Tensor nll_sum(const torch::Tensor& logits, const torch::Tensor& targets) {
  return loss_sums(logits, targets).nll;
}

torch::Tensor next_token_nll_sum(const torch::Tensor& logits, const torch::Tensor& ids) {
  const int64_t T = ids.size(1);
  return nll_sum(logits.slice(1, 0, T - 1), ids.slice(1, 1, T));
}

LossSums lm_loss_sums(TransformerImpl& model, const torch::Tensor& ids,
                      std::optional<double> z_loss_multiplier, const std::optional<DocumentRule>& documents,
                      AuxLosses* aux) {
  const int64_t T = ids.size(1);
  const auto input = ids.narrow(1, 0, T - 1), targets = ids.narrow(1, 1, T - 1);
  ForwardOptions opts;
  opts.aux = aux;
  std::optional<Documents> docs;
  if (documents) {
    docs = find_documents(input, documents->eos_id, documents->restart_positions);
    opts.documents = &*docs;
  }
  return head_loss_sums(model, model.hidden(input, opts), targets, z_loss_multiplier);
}

torch::Tensor lm_loss_sum(TransformerImpl& model, const torch::Tensor& ids) {
  return lm_loss_sums(model, ids).nll;
}

}  // namespace siamese::model
