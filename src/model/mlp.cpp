#include "siamese/model/mlp.h"

#include <algorithm>

#include "siamese/common/autocast.h"
#include "siamese/kernels/swiglu.h"

namespace siamese::model {

int64_t mlp_hidden_size(const config::ModelConfig& cfg) {
  return cfg.mlp_hidden_size.value_or(cfg.mlp_ratio * cfg.d_model);
}

int64_t mlp_inner_size(const config::ModelConfig& cfg) {
  return cfg.activation_type == config::Activation::SwiGLU ? mlp_hidden_size(cfg) / 2 : mlp_hidden_size(cfg);
}

int64_t active_experts(const config::ModelConfig& cfg) {
  return cfg.is_moe() ? cfg.moe_top_k + (cfg.moe_shared_expert ? 1 : 0) : 1;
}

MlpImpl::MlpImpl(const config::ModelConfig& cfg, SublayerHooks hooks)
    : activation_(cfg.activation_type), hooks_(std::move(hooks)) {
  const bool moe = cfg.is_moe();
  if (!moe || cfg.moe_shared_expert) {
    ff_proj = register_module(
        "ff_proj", torch::nn::Linear(
                       torch::nn::LinearOptions(cfg.d_model, mlp_hidden_size(cfg)).bias(cfg.include_bias)));
    ff_out = register_module(
        "ff_out",
        torch::nn::Linear(torch::nn::LinearOptions(mlp_inner_size(cfg), cfg.d_model).bias(cfg.include_bias)));
  }
  if (!moe) return;
  top_k_ = cfg.moe_top_k;
  norm_topk_ = cfg.moe_norm_topk_prob;
  dropless_ = cfg.moe_dropless;
  lbl_in_fp32_ = cfg.moe_lbl_in_fp32;
  capacity_factor_ = cfg.moe_capacity_factor;
  blocks_ = double(cfg.n_layers);
  load_balancing_weight_ = cfg.moe_loss_weight;
  z_loss_weight_ = cfg.moe_zloss_weight.value_or(0.0);
  loop_ = cfg.moe_mlp_impl == config::MoeImpl::Loop;
  const int64_t experts = cfg.moe_num_experts;
  router = register_module("router",
                           torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, experts).bias(false)));
  // Values are drawn by TransformerImpl::reset_parameters, like every other matrix.
  auto holder = register_module("experts", std::make_shared<torch::nn::Module>("Experts"));
  expert_ff_proj =
      holder->register_parameter("ff_proj", torch::empty({experts, mlp_hidden_size(cfg), cfg.d_model}));
  expert_ff_out =
      holder->register_parameter("ff_out", torch::empty({experts, cfg.d_model, mlp_inner_size(cfg)}));
}

namespace {

// SwiGLU as one autograd node on kernels/swiglu.h's passes, on the CPU and on CUDA. Saves only
// h, the MLP's projection output (LibTorch's form keeps b, silu(b) and a).
class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h) {
    ctx->save_for_backward({h});
    return kernels::swiglu(h);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {kernels::swiglu_backward(ctx->get_saved_variables()[0], grads[0])};
  }
};

}  // namespace

torch::Tensor MlpImpl::activate(const torch::Tensor& h) const {
  if (activation_ == config::Activation::SwiGLU) {
    if (!hooks_.swiglu && kernels::swiglu_supports(h)) return SwigluFunction::apply(h);
    auto parts = h.chunk(2, -1);
    if (hooks_.swiglu) std::tie(parts[0], parts[1]) = hooks_.swiglu(parts[0], parts[1]);
    return torch::silu(parts[1]) * parts[0];
  }
  return activation_ == config::Activation::GELU ? torch::gelu(h) : torch::relu(h);
}

bool MlpImpl::runs_grouped(const torch::Tensor& inputs) const {
  if (loop_) return false;
  const auto dtype = matmul_dtype(inputs);
  // LibTorch's kernels want every operand's row stride a multiple of 16 bytes.
  const int64_t bytes = c10::elementSize(dtype), d = inputs.size(1), inner = expert_ff_out.size(2);
  if ((d * bytes) % 16 != 0 || (inner * bytes) % 16 != 0) return false;
  if (inputs.is_cuda()) return dtype == torch::kBFloat16;
  return inputs.is_cpu() && (dtype == torch::kFloat || dtype == torch::kBFloat16 || dtype == torch::kHalf);
}

torch::Tensor MlpImpl::grouped_experts(const torch::Tensor& inputs, const std::vector<int64_t>& kept) const {
  std::vector<int32_t> ends(kept.size());
  int64_t end = 0;
  for (size_t e = 0; e < kept.size(); ++e) ends[e] = static_cast<int32_t>(end += kept[e]);
  const auto offs = torch::tensor(at::ArrayRef<int32_t>(ends), torch::kInt).to(inputs.device());
  const auto dtype = matmul_dtype(inputs);
  // Weights [E, out, in] seen as [E, in, out]: the column-major right operand the kernels take.
  const auto h = at::_grouped_mm(inputs.to(dtype), expert_ff_proj.to(dtype).transpose(1, 2), offs);
  return at::_grouped_mm(activate(h).contiguous(), expert_ff_out.to(dtype).transpose(1, 2), offs);
}

torch::Tensor MlpImpl::looped_experts(const torch::Tensor& inputs, const std::vector<int64_t>& kept) const {
  std::vector<torch::Tensor> outputs;
  int64_t offset = 0;
  for (size_t e = 0; e < kept.size(); ++e) {
    if (kept[e] == 0) continue;
    const auto i = static_cast<int64_t>(e);
    const auto h = activate(torch::linear(inputs.narrow(0, offset, kept[e]), expert_ff_proj[i]));
    outputs.push_back(torch::linear(h, expert_ff_out[i]));
    offset += kept[e];
  }
  return torch::cat(outputs);
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x, AuxLosses* aux) {
  if (!router) return ff_out(activate(ff_proj(x)));
  MoeOutput r = route(x);
  if (!aux) return r.out;
  aux->add(kMoeLoadBalancingLoss, r.load_balancing.detach() / blocks_);
  aux->add(kMoeZLoss, r.z_loss.detach() / blocks_);
  aux->routing.push_back(static_cast<const ExpertLoad&>(r));
  if (!aux->grad_scale.defined() || !torch::GradMode::is_enabled()) return r.out;
  const auto weighted =
      r.load_balancing * (load_balancing_weight_ / blocks_) + r.z_loss * (z_loss_weight_ / blocks_);
  return attach_aux_loss(r.out, weighted, aux->grad_scale);
}

MoeOutput MlpImpl::route(const torch::Tensor& x) {
  MoeOutput r;
  const int64_t d = x.size(-1), experts = expert_ff_proj.size(0);
  const auto flat = x.reshape({-1, d});
  const int64_t tokens = flat.size(0), assignments = tokens * top_k_;

  const auto logits = router(flat);
  // The routing runs in float32 at least (transformers' softmax(..., dtype=float)).
  const auto routing = at::promote_types(logits.scalar_type(), torch::kFloat);
  const auto probs = torch::softmax(logits, -1, routing);
  auto [top_p, top_e] = probs.topk(top_k_, -1);
  if (norm_topk_) top_p = top_p / top_p.sum(-1, true);
  top_p = top_p.to(logits.scalar_type());

  // Assignment a = token * top_k + slot; sorted stably by expert, tokens stay in order.
  const auto expert_of = top_e.reshape(-1);
  const auto order = std::get<1>(expert_of.sort(/*stable=*/true, 0, false));
  const auto token_of = order.div(top_k_, "floor");
  const auto weight_of = top_p.reshape(-1).index_select(0, order);
  const auto counts = torch::bincount(expert_of, {}, experts);
  const auto counts_cpu = counts.to(torch::kCPU);
  const auto* count = counts_cpu.data_ptr<int64_t>();

  const int64_t capacity =
      dropless_ ? assignments : int64_t(capacity_factor_ * double(assignments) / double(experts));
  std::vector<int64_t> kept(experts);
  r.tokens_per_expert.assign(count, count + experts);
  r.assignments = assignments;
  for (int64_t e = 0; e < experts; ++e) {
    kept[e] = std::min(count[e], capacity);
    r.dropped += count[e] - kept[e];
  }
  // The kept assignments in expert order: each expert's first `kept` of its sorted rows.
  auto rows = token_of, weights = weight_of;
  if (r.dropped > 0) {
    std::vector<int64_t> keep;
    int64_t offset = 0;
    for (int64_t e = 0; e < experts; ++e) {
      for (int64_t i = 0; i < kept[e]; ++i) keep.push_back(offset + i);
      offset += count[e];
    }
    const auto keep_index = torch::tensor(keep, torch::kLong).to(flat.device());
    rows = rows.index_select(0, keep_index);
    weights = weights.index_select(0, keep_index);
  }
  auto out = torch::zeros_like(flat);
  if (rows.numel() > 0) {
    const auto inputs = flat.index_select(0, rows);
    const auto routed = runs_grouped(inputs) ? grouped_experts(inputs, kept) : looped_experts(inputs, kept);
    out = out.index_add(0, rows, (routed * weights.unsqueeze(1)).to(out.scalar_type()));
  }
  if (ff_proj) out = out + ff_out(activate(ff_proj(flat)));

  // A rank with no rows this micro-batch still runs it (gradient sync): its losses are 0.
  const double per_token = 1.0 / double(std::max<int64_t>(tokens, 1));
  const auto share = counts.to(routing) * (per_token / double(top_k_));
  const auto mean_p = (lbl_in_fp32_ ? probs : probs.to(logits.scalar_type())).sum(0) * per_token;
  r.load_balancing = double(experts) * (share.to(mean_p.scalar_type()) * mean_p).sum();
  r.z_loss = torch::logsumexp(logits.to(routing), -1).square().sum() * per_token;
  r.out = out.reshape(x.sizes());
  return r;
}

}  // namespace siamese::model
