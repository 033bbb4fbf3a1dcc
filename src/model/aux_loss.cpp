#include "siamese/model/aux_loss.h"

namespace siamese::model {
namespace {

struct AttachAuxLoss : torch::autograd::Function<AttachAuxLoss> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& activation,
                               const torch::Tensor& loss, const torch::Tensor& grad_scale) {
    ctx->save_for_backward({grad_scale});
    ctx->saved_data["dtype"] = static_cast<int64_t>(loss.scalar_type());
    return activation.view_as(activation);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto scale = ctx->get_saved_variables()[0];
    return {grads[0], scale.to(dtype).reshape({}), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor attach_aux_loss(const torch::Tensor& activation, const torch::Tensor& loss,
                              const torch::Tensor& grad_scale) {
  return AttachAuxLoss::apply(activation, loss, grad_scale);
}

}  // namespace siamese::model
