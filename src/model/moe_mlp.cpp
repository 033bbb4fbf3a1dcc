#include "siamese/model/moe_mlp.h"

#include <algorithm>

#include <fmt/format.h>

#include <cmath>

#include "siamese/common/autocast.h"
#include "siamese/common/error.h"

namespace siamese::model {
namespace {

// The routing keys: raw counts summed over blocks, micro-batches and ranks, then the shares
// the finisher derives from them (moe_mlp.h).
constexpr const char* kExpertTokens = "moe_expert_tokens";
constexpr const char* kAssignments = "moe_assignments";
constexpr const char* kDropped = "moe_dropped";

void finish_routing(StepValues& v, bool keep_counts) {
  const auto counts = v[kExpertTokens];  // [blocks, experts], every rank's
  const auto total = counts.sum(1, true);
  const auto used = total > 0;
  const auto share = counts / total.clamp_min(1);
  const auto min_share = torch::where(used, share, torch::ones_like(share)).min();
  const auto max_share = torch::where(used, share, torch::zeros_like(share)).max();
  const auto entropy = -torch::xlogy(share, share).sum() / double(counts.size(0));
  const auto dropped = v[kDropped] / v[kAssignments].clamp_min(1);
  for (const char* raw : {kExpertTokens, kAssignments, kDropped}) v.remove(raw);
  v.add("moe_load_min", min_share, Reduce::None);
  v.add("moe_load_max", max_share, Reduce::None);
  v.add("moe_load_entropy", entropy, Reduce::None);
  v.add("moe_dropped_fraction", dropped, Reduce::None);
  if (keep_counts) v.add(kExpertTokens, counts, Reduce::None);
}

}  // namespace

MoeMlpImpl::MoeMlpImpl(const config::ModelConfig& cfg, SublayerHooks hooks, int64_t layer)
    : activation_(cfg.activation_type),
      hooks_(std::move(hooks)),
      layer_(layer),
      blocks_(cfg.n_layers),
      top_k_(cfg.moe_top_k),
      norm_topk_(cfg.moe_norm_topk_prob),
      dropless_(cfg.moe_dropless),
      lbl_in_fp32_(cfg.moe_lbl_in_fp32),
      loop_(cfg.moe_mlp_impl == config::MoeImpl::Loop),
      log_counts_(cfg.moe_log_expert_assignment),
      capacity_factor_(cfg.moe_capacity_factor),
      load_balancing_weight_(cfg.moe_loss_weight),
      z_loss_weight_(cfg.moe_zloss_weight.value_or(0.0)),
      bias_rate_(cfg.moe_router_bias_rate.value_or(0.0)),
      per_sequence_lb_(cfg.moe_lb_loss_granularity == config::LbLossGranularity::Instance) {
  if (cfg.moe_shared_expert) {
    ff_proj = register_module(
        "ff_proj", torch::nn::Linear(
                       torch::nn::LinearOptions(cfg.d_model, mlp_hidden_size(cfg)).bias(cfg.include_bias)));
    ff_out = register_module(
        "ff_out",
        torch::nn::Linear(torch::nn::LinearOptions(mlp_inner_size(cfg), cfg.d_model).bias(cfg.include_bias)));
  }
  const int64_t experts = cfg.moe_num_experts;
  router = register_module("router",
                           torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, experts).bias(false)));
  // Values are drawn by TransformerImpl::reset_parameters, like every other matrix.
  if (cfg.moe_router_bias_rate) score_bias = register_buffer("score_bias", torch::zeros({experts}));
  auto holder = register_module("experts", std::make_shared<torch::nn::Module>("Experts"));
  expert_ff_proj =
      holder->register_parameter("ff_proj", torch::empty({experts, mlp_hidden_size(cfg), cfg.d_model}));
  expert_ff_out =
      holder->register_parameter("ff_out", torch::empty({experts, cfg.d_model, mlp_inner_size(cfg)}));
}

std::vector<FfnMatrix> MoeMlpImpl::matrices() {
  std::vector<FfnMatrix> m;
  if (ff_proj) {
    m.push_back({FfnRole::Input, ff_proj->weight, ff_proj->bias});
    m.push_back({FfnRole::Output, ff_out->weight, ff_out->bias});
  }
  // OLMoE's router and experts are matrices like any other (megablocks' init_method for the
  // router and the experts' inputs, output_layer_init_method for their outputs).
  m.push_back({FfnRole::Router, router->weight, {}});
  m.push_back({FfnRole::Input, expert_ff_proj, {}});
  m.push_back({FfnRole::Output, expert_ff_out, {}});
  return m;
}

bool MoeMlpImpl::runs_grouped(const torch::Tensor& inputs) const {
  if (loop_) return false;
  const auto dtype = matmul_dtype(inputs);
  // LibTorch's kernels want every operand's row stride a multiple of 16 bytes.
  const int64_t bytes = c10::elementSize(dtype), d = inputs.size(1), inner = expert_ff_out.size(2);
  if ((d * bytes) % 16 != 0 || (inner * bytes) % 16 != 0) return false;
  if (inputs.is_cuda()) return dtype == torch::kBFloat16;
  return inputs.is_cpu() && (dtype == torch::kFloat || dtype == torch::kBFloat16 || dtype == torch::kHalf);
}

torch::Tensor MoeMlpImpl::grouped_experts(const torch::Tensor& inputs, const torch::Tensor& kept) const {
  const auto offs = kept.cumsum(0).to(torch::kInt);
  const auto dtype = matmul_dtype(inputs);
  // Weights [E, out, in] seen as [E, in, out]: the column-major right operand the kernels take.
  const auto h = at::_grouped_mm(inputs.to(dtype), expert_ff_proj.to(dtype).transpose(1, 2), offs);
  return at::_grouped_mm(activate(activation_, hooks_, h).contiguous(),
                         expert_ff_out.to(dtype).transpose(1, 2), offs);
}

torch::Tensor MoeMlpImpl::looped_experts(const torch::Tensor& inputs, const torch::Tensor& kept) const {
  const auto host = kept.cpu();
  const auto* n = host.data_ptr<int64_t>();
  std::vector<torch::Tensor> outputs;
  int64_t offset = 0;
  for (int64_t e = 0; e < host.numel(); ++e) {
    if (n[e] == 0) continue;
    const auto h =
        activate(activation_, hooks_, torch::linear(inputs.narrow(0, offset, n[e]), expert_ff_proj[e]));
    outputs.push_back(torch::linear(h, expert_ff_out[e]));
    offset += n[e];
  }
  return torch::cat(outputs);
}

torch::Tensor MoeMlpImpl::forward(const torch::Tensor& x, AuxLosses* aux) {
  MoeOutput r = route(x);
  if (!aux) return r.out;
  record(r, *aux);
  if (!aux->grad_scale.defined() || !torch::GradMode::is_enabled()) return r.out;
  const double blocks = double(blocks_);
  const auto weighted =
      r.load_balancing * (load_balancing_weight_ / blocks) + r.z_loss * (z_loss_weight_ / blocks);
  return attach_aux_loss(r.out, weighted, aux->grad_scale);
}

void MoeMlpImpl::record(const MoeOutput& r, AuxLosses& aux) const {
  auto& v = aux.values;
  const double weight = aux.share / double(blocks_);
  // Weighed in float64: the record's precision, not the routing's.
  v.add(kMoeLoadBalancingLoss, r.load_balancing.to(torch::kFloat64) * weight);
  v.add(kMoeZLoss, r.z_loss.to(torch::kFloat64) * weight);
  // This block's row of the [blocks, experts] counts; the others stay 0.
  const auto counts = r.tokens_per_expert.to(torch::kFloat64);
  auto row = torch::zeros({blocks_, counts.size(0)}, counts.options());
  row.select(0, layer_).copy_(counts);
  v.add(kExpertTokens, row);
  v.add(kAssignments, torch::full({}, double(r.assignments), counts.options()));
  v.add(kDropped, r.dropped);
  v.on_reduced("moe_routing", [keep = log_counts_](StepValues& values) { finish_routing(values, keep); });
  // Training only; not grad mode: activation checkpointing's first pass, the one that records,
  // runs without gradients.
  if (!score_bias.defined() || !is_training()) return;
  // The bias follows the step's loads, every rank's: its own entry, reduced with the rest.
  const std::string loads = fmt::format("moe_router_bias_loads.{}", layer_);
  v.add(loads, counts);
  v.on_reduced(loads, [loads, bias = score_bias, rate = bias_rate_](StepValues& values) {
    torch::NoGradGuard no_grad;
    const auto load = values[loads];
    bias.add_((rate * (load.mean() - load).sign()).to(bias.scalar_type()));
    values.remove(loads);
  });
}

MoeOutput MoeMlpImpl::route(const torch::Tensor& x) {
  MoeOutput r;
  const int64_t d = x.size(-1), experts = expert_ff_proj.size(0);
  const auto flat = x.reshape({-1, d});
  const int64_t tokens = flat.size(0), assignments = tokens * top_k_;

  const auto logits = router(flat);
  // The routing runs in float32 at least (transformers' softmax(..., dtype=float)).
  const auto routing = at::promote_types(logits.scalar_type(), torch::kFloat);
  const auto probs = torch::softmax(logits, -1, routing);
  auto [top_p, top_e] = probs.topk(top_k_, -1);
  if (score_bias.defined()) {
    {
      torch::NoGradGuard no_grad;
      top_e = std::get<1>((probs + score_bias).topk(top_k_, -1));
    }
    top_p = probs.gather(-1, top_e);
  }
  if (norm_topk_) top_p = top_p / top_p.sum(-1, true);
  top_p = top_p.to(logits.scalar_type());
  r.experts = top_e;
  r.weights = top_p;

  // Assignment a = token * top_k + slot; sorted stably by expert, tokens stay in order.
  const auto expert_of = top_e.reshape(-1);
  const auto order = std::get<1>(expert_of.sort(/*stable=*/true, 0, false));
  auto rows = order.div(top_k_, "floor");
  auto weights = top_p.reshape(-1).index_select(0, order);
  // A scatter, not bincount: bincount waits for the device to size its output.
  const auto counts =
      torch::zeros({experts}, expert_of.options()).scatter_add_(0, expert_of, torch::ones_like(expert_of));
  r.tokens_per_expert = counts;
  r.assignments = assignments;
  auto kept = counts;
  r.dropped = torch::zeros({}, counts.options());
  if (!dropless_) {
    // Dropping needs the counts on the host: the kept rows are each expert's first ones.
    const int64_t capacity = int64_t(capacity_factor_ * double(assignments) / double(experts));
    kept = counts.clamp_max(capacity);
    r.dropped = (counts - kept).sum();
    const auto host = counts.cpu();
    const auto* count = host.data_ptr<int64_t>();
    std::vector<int64_t> keep;
    int64_t offset = 0;
    for (int64_t e = 0; e < experts; ++e) {
      for (int64_t i = 0; i < std::min(count[e], capacity); ++i) keep.push_back(offset + i);
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
  if (ff_proj) out = out + ff_out(activate(activation_, hooks_, ff_proj(flat)));

  // A rank with no rows this micro-batch still runs it (gradient sync): its losses are 0.
  const double per_token = 1.0 / double(std::max<int64_t>(tokens, 1));
  const auto lb_probs = lbl_in_fp32_ ? probs : probs.to(logits.scalar_type());
  if (per_sequence_lb_ && x.dim() == 3 && tokens > 0) {
    // Per sequence b: experts / top_k * sum_e P_be * n_be, over all tokens (OLMo-core's instance).
    const int64_t B = x.size(0);
    // Counted in float32: a sequence's hundreds of assignments to an expert are not exact in bf16.
    const auto f32 = lb_probs.options().dtype(torch::kFloat);
    const auto seq_counts =
        torch::zeros({B, experts}, f32)
            .scatter_add_(1, top_e.reshape({B, -1}), torch::ones_like(top_e.reshape({B, -1}), f32));
    const auto seq_p = lb_probs.to(torch::kFloat).reshape({B, -1, experts}).mean(1);
    r.load_balancing = (double(experts) / double(top_k_)) * (seq_p * seq_counts).sum() * per_token;
  } else {
    const auto share = counts.to(routing) * (per_token / double(top_k_));
    const auto mean_p = lb_probs.sum(0) * per_token;
    r.load_balancing = double(experts) * (share.to(mean_p.scalar_type()) * mean_p).sum();
  }
  r.z_loss = torch::logsumexp(logits.to(routing), -1).square().sum() * per_token;
  r.out = out.reshape(x.sizes());
  return r;
}

// Without moe_dropless an expert keeps int(moe_capacity_factor * tokens * top_k / experts)
// assignments of each micro-batch (moe_mlp.h). Where that is 0, every routed token is dropped on
// every step and the experts never train: refused before anything is built, not logged.
void check_moe_capacity(const config::ModelConfig& m, int64_t micro_batch) {
  if (!m.is_moe() || m.moe_dropless) return;
  // A sequence of T tokens is T - 1 inputs (the last token is only a target).
  const int64_t tokens = micro_batch * (m.max_sequence_length - 1);
  const double assignments = double(tokens) * double(m.moe_top_k);
  if (int64_t(m.moe_capacity_factor * assignments / double(m.moe_num_experts)) >= 1) return;
  throw Error(
      fmt::format("each expert may keep int({} x {} tokens x top {} / {} experts) = 0 assignments of a "
                  "micro-batch, so every routed token would be dropped and the experts would never train",
                  m.moe_capacity_factor, tokens, m.moe_top_k, m.moe_num_experts),
      "model.moe_capacity_factor",
      fmt::format("raise model.moe_capacity_factor to at least {:g} (1 assignment per expert), or set "
                  "model.moe_dropless: true",
                  std::ceil(1e4 * double(m.moe_num_experts) / assignments) / 1e4));
}

}  // namespace siamese::model
