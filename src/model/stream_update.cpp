// The stream update's autograd node (stream_update.h) over the kernels' forward and backward.
#include "siamese/model/stream_update.h"

namespace siamese::model {
namespace {

using kernels::StreamNormSpec;
using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The stream update as one autograd node. Outputs x', y', then nx and ny for the norms that
// are on. Saves x', y' (the new streams, alive anyway) and the per-row r (and mean) of each
// norm.
class StreamUpdateFunction : public torch::autograd::Function<StreamUpdateFunction> {
 public:
  // The weights come separately from the specs so that autograd sees them as inputs.
  // two false: one stream, y is a placeholder (autograd takes no undefined input) and unread.
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& y_in, const Tensor& o,
                               const c10::optional<Tensor>& w_x, const c10::optional<Tensor>& w_y,
                               double alpha, StreamNormSpec norm_x, StreamNormSpec norm_y, bool two) {
    const Tensor y = two ? y_in : Tensor();
    norm_x.weight = w_x.value_or(Tensor());
    norm_y.weight = w_y.value_or(Tensor());
    auto out = kernels::stream_update_forward(x, y, o, alpha, norm_x, norm_y);
    ctx->set_materialize_grads(false);
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["on_x"] = norm_x.on;
    ctx->saved_data["on_y"] = norm_y.on;
    ctx->saved_data["centered_x"] = norm_x.centered;
    ctx->saved_data["centered_y"] = norm_y.centered;
    ctx->saved_data["two"] = y.defined();
    ctx->save_for_backward({out.x, out.y, out.rx, out.ry, out.mux, out.muy, norm_x.weight, norm_y.weight});
    // Autograd takes no undefined output: one stream returns no y'.
    variable_list result{out.x};
    if (y.defined()) result.push_back(out.y);
    if (norm_x.on) result.push_back(out.nx);
    if (norm_y.on) result.push_back(out.ny);
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool on_x = ctx->saved_data["on_x"].toBool(), on_y = ctx->saved_data["on_y"].toBool();
    const StreamNormSpec norm_x{on_x, saved[6], 0, ctx->saved_data["centered_x"].toBool()},
        norm_y{on_y, saved[7], 0, ctx->saved_data["centered_y"].toBool()};
    const kernels::StreamUpdateOut fwd{saved[0], saved[1], {}, {}, saved[2], saved[3], saved[4], saved[5]};
    const size_t norms_at = ctx->saved_data["two"].toBool() ? 2 : 1;
    auto g = kernels::stream_update_backward(
        grads[0], norms_at == 2 ? grads[1] : Tensor(), on_x ? grads[norms_at] : Tensor(),
        on_y ? grads[norms_at + on_x] : Tensor(), fwd, ctx->saved_data["alpha"].toDouble(), norm_x, norm_y);
    return {g.dx, g.dy, g.d_o, g.dw_x, g.dw_y, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

c10::optional<Tensor> optional_weight(const Tensor& t) {
  return t.defined() ? c10::optional<Tensor>(t) : c10::nullopt;
}

}  // namespace

Streams stream_update(const Tensor& x, const Tensor& y, const Tensor& o, double alpha,
                      const StreamNormSpec& norm_x, const StreamNormSpec& norm_y) {
  const auto out = StreamUpdateFunction::apply(x, y, o, optional_weight(norm_x.weight),
                                               optional_weight(norm_y.weight), alpha, norm_x, norm_y, true);
  Streams s{out[0], out[1], {}, {}};
  if (norm_x.on) s.nx = out[2];
  if (norm_y.on) s.ny = out[2 + norm_x.on];
  return s;
}

Streams residual_update(const Tensor& x, const Tensor& o, double alpha, const StreamNormSpec& norm) {
  // One stream: the node returns x' and nx; its y slot (x again) gets no gradient.
  const auto out = StreamUpdateFunction::apply(x, x, o, optional_weight(norm.weight), c10::optional<Tensor>(),
                                               alpha, norm, StreamNormSpec{}, false);
  Streams s{out[0], {}, {}, {}};
  if (norm.on) s.nx = out[1];
  return s;
}

}  // namespace siamese::model
