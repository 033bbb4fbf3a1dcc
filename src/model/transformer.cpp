#include "siamese/model/transformer.h"

#include <cmath>

#include "siamese/model/activation_checkpoint.h"
#include "siamese/model/topology_table.h"

namespace siamese::model {

BlockRunner& direct_blocks() {
  struct Direct : BlockRunner {
    void run(int64_t, std::vector<torch::Tensor>&, const std::function<void()>& block) override { block(); }
  };
  static Direct direct;
  return direct;
}

BlockImpl::BlockImpl(const config::ModelConfig& cfg, const SublayerHooks& hooks, int64_t layer,
                     std::optional<int64_t> window) {
  attn = register_module("attn", Attention(cfg, hooks, window));
  mlp = register_module("mlp", make_feed_forward(cfg, hooks, layer));
}

TransformerImpl::TransformerImpl(const config::ModelConfig& cfg) : cfg_(cfg), shape_(parametrization(cfg)) {
  check_model_config(cfg);
  wte = register_module("wte", torch::nn::Embedding(cfg.embedding_size, cfg.d_model));
  if (!cfg.rope) wpe = register_module("wpe", torch::nn::Embedding(cfg.max_sequence_length, cfg.d_model));
  if (cfg.embedding_layer_norm) emb_norm = register_module("emb_norm", make_norm(cfg, cfg.d_model));
  // Built before the blocks, whose sublayers take its hooks; registered after them, so that
  // parameters keep their order.
  auto topology = make_topology(cfg);
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    SublayerHooks hooks = topology->sublayer_hooks(i);
    if (shape_.softmax() != 1.0)
      hooks.softmax_scale =
          hooks.softmax_scale.value_or(1.0 / std::sqrt(double(cfg.d_model / cfg.n_heads))) * shape_.softmax();
    block_list_.emplace_back(cfg, hooks, i, attention_window(cfg, i));
    blocks->push_back(block_list_.back());
  }
  topology_ = register_module("topology", topology);
  if (!cfg.weight_tying)
    ff_out = register_module(
        "ff_out",
        torch::nn::Linear(torch::nn::LinearOptions(cfg.d_model, cfg.embedding_size).bias(cfg.include_bias)));
  reset_parameters();
}

torch::Tensor TransformerImpl::hidden(const torch::Tensor& input_ids, const ForwardOptions& opts) {
  TORCH_CHECK(input_ids.dim() == 2, "input_ids must be [batch, seq], got ", input_ids.sizes());
  const int64_t T = input_ids.size(1);
  const int64_t past = opts.cache ? opts.cache->length() : 0;
  TORCH_CHECK(!opts.cache || int64_t(opts.cache->layers.size()) == cfg_.n_layers, "KV cache has ",
              opts.cache ? opts.cache->layers.size() : 0, " layers, model ", cfg_.n_layers);
  auto x = wte(input_ids);
  if (emb_norm) x = emb_norm(x);
  if (wpe) {
    TORCH_CHECK(past + T <= cfg_.max_sequence_length, "sequence of ", past + T,
                " tokens exceeds max_sequence_length ", cfg_.max_sequence_length);
    x = x + wpe(torch::arange(past, past + T, input_ids.options()));
  }
  x = torch::dropout(x, cfg_.embedding_dropout, is_training());

  const int64_t n = opts.n_blocks.value_or(cfg_.n_layers);
  TORCH_CHECK(n >= 0 && n <= cfg_.n_layers, "n_blocks ", n, " outside [0, ", cfg_.n_layers, "]");
  auto report = [&](int64_t layer, const State& st) {
    if (opts.probe)
      for (size_t i = 0; i < st.streams.size(); ++i) (*opts.probe)(layer, st.names[i], st[i]);
  };
  State st = topology_->begin(x);
  report(-1, st);
  for (int64_t l = 0; l < n; ++l) {
    block_runner_->run(l, st.streams, [&] { forward_block(st, l, opts); });
    report(l, st);
  }
  auto h = topology_->finish(st);
  if (opts.mixing_probe)
    for (const auto& [name, w] : st.mixing) (*opts.mixing_probe)(n, "final." + name, w);
  if (opts.probe) (*opts.probe)(n, "final", h);
  return h;
}

void TransformerImpl::forward_block(State& st, int64_t l, const ForwardOptions& opts) {
  if (!is_training() || opts.sublayer_probe || opts.mixing_probe || opts.cache ||
      !checkpoints_block(cfg_.activation_checkpointing, l)) {
    run_block(st, l, opts.sublayer_probe, opts.mixing_probe, opts.cache ? &opts.cache->layers[l] : nullptr,
              opts.documents, opts.aux);
    return;
  }
  // The closure outlives this call (backward runs it again): it holds copies only. A block
  // may add streams (AttnRes's sources): their names come back through `names_after`.
  // Auxiliary losses reach their gradients through the recomputation (aux_loss.h); the
  // blocks' values are the first run's, recorded while `aux` still lives.
  auto docs = opts.documents ? std::make_shared<const Documents>(*opts.documents) : nullptr;
  auto names_after = std::make_shared<std::vector<std::string>>();
  auto record = std::make_shared<AuxLosses*>(opts.aux);
  const torch::Tensor grad_scale = opts.aux ? opts.aux->grad_scale : torch::Tensor();
  const double share = opts.aux ? opts.aux->share : 1.0;
  st.streams = checkpointed(st.streams, [this, names = st.names, names_after, l, docs, record, grad_scale,
                                         share](const std::vector<torch::Tensor>& in) {
    State block_state{names, in};
    AuxLosses recomputed{grad_scale, share};
    AuxLosses* aux = *record ? *record : &recomputed;
    *record = nullptr;
    run_block(block_state, l, nullptr, nullptr, nullptr, docs.get(), aux);
    *names_after = block_state.names;
    return block_state.streams;
  });
  st.names = *names_after;
}

void TransformerImpl::run_block(State& st, int64_t layer, const Probe* sublayer_probe,
                                const Probe* mixing_probe, LayerCache* cache, const Documents* documents,
                                AuxLosses* aux) {
  auto& block = block_list_[layer];
  for (int64_t s = 2 * layer; s < 2 * layer + 2; ++s) {
    const bool attention = TopologyImpl::is_attention(s);
    auto in = topology_->enter(st, s);
    if (mixing_probe)
      for (const auto& [name, w] : st.mixing)
        (*mixing_probe)(layer, (attention ? "attn." : "ffn.") + name, w);
    st.mixing.clear();
    auto out = attention ? block->attn(in, cache, documents) : block->mlp->forward(in, aux);
    if (sublayer_probe) {
      (*sublayer_probe)(layer, attention ? "attn_in" : "ffn_in", in);
      (*sublayer_probe)(layer, attention ? "attn_out" : "ffn_out", out);
    }
    if (shape_.branch() != 1.0) out = out * shape_.branch();
    topology_->leave(st, torch::dropout(out, cfg_.residual_dropout, is_training()), s);
  }
}

torch::Tensor TransformerImpl::head(const torch::Tensor& h) {
  auto logits = cfg_.weight_tying ? torch::linear(h, wte->weight) : ff_out(h);
  if (cfg_.scale_logits) logits = logits / std::sqrt(double(cfg_.d_model));
  if (shape_.logits() != 1.0) logits = logits * shape_.logits();
  return topology_->scale_logits(logits);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& input_ids) { return head(hidden(input_ids)); }

torch::Tensor TransformerImpl::forward(const torch::Tensor& input_ids, const ForwardOptions& opts) {
  return head(hidden(input_ids, opts));
}

void TransformerImpl::use_reference_attention(bool on) {
  for (auto& b : block_list_) b->attn->use_reference_kernel(on);
}

void TransformerImpl::use_fused_heads_on_cpu(bool on) {
  for (auto& b : block_list_) b->attn->use_fused_heads_on_cpu(on);
}

namespace {

// Normal(0, std) truncated to [-cutoff*std, cutoff*std] by inverse-CDF sampling (the
// method of torch.nn.init.trunc_normal_); plain normal without a cutoff.
void init_normal(const torch::Tensor& w, double std, std::optional<double> cutoff) {
  torch::NoGradGuard guard;
  if (!cutoff) {
    w.normal_(0.0, std);
    return;
  }
  const double a = -*cutoff, b = *cutoff;  // in units of std
  auto cdf = [](double z) { return 0.5 * (1.0 + std::erf(z / std::sqrt(2.0))); };
  w.uniform_(2.0 * cdf(a) - 1.0, 2.0 * cdf(b) - 1.0);
  w.erfinv_().mul_(std * std::sqrt(2.0)).clamp_(a * std, b * std);
}

void init_linear(const torch::nn::Linear& m, double std, std::optional<double> cutoff) {
  init_normal(m->weight, std, cutoff);
  if (m->bias.defined()) {
    torch::NoGradGuard guard;
    m->bias.zero_();
  }
}

}  // namespace

// OLMo's rules (allenai/OLMo olmo/model.py: OLMo.reset_parameters,
// OLMoBlock.reset_parameters, OLMoSequentialBlock.reset_parameters):
//   normal:        every matrix N(0, init_std), wte N(0, emb_init_std or init_std),
//                  truncated at init_cutoff_factor*std when set;
//   mitchell:      inputs 1/sqrt(d); attn_out 1/sqrt(2 d (l+1)); ff_out 1/sqrt(2 d_ff (l+1));
//                  wte emb_init_std or 1/sqrt(d); head 1/sqrt(d); cutoff (or 3) * std;
//   full_megatron: inputs init_std; attn_out, ff_out init_std/sqrt(2 n_layers); wte init_std
//                  (emb_init_std, else * sqrt(d) with scale_emb_init); head 1/sqrt(d);
//                  cutoff (or 3) * std.
void TransformerImpl::reset_parameters() {
  const auto& c = cfg_;
  const double d = double(c.d_model), inv_sqrt_d = 1.0 / std::sqrt(d);
  const bool normal = c.init_fn == config::InitFn::Normal, mitchell = c.init_fn == config::InitFn::Mitchell;
  const std::optional<double> cutoff =
      normal ? c.init_cutoff_factor : std::optional<double>(c.init_cutoff_factor.value_or(3.0));

  double wte_std = normal ? c.init_std : mitchell ? inv_sqrt_d : c.init_std;
  if (c.emb_init_std)
    wte_std = *c.emb_init_std;
  else if (c.init_fn == config::InitFn::FullMegatron && c.scale_emb_init)
    wte_std *= std::sqrt(d);
  init_normal(wte->weight, wte_std, cutoff);
  if (wpe) init_normal(wpe->weight, mitchell ? inv_sqrt_d : c.init_std, cutoff);
  if (ff_out) init_linear(ff_out, normal ? c.init_std : inv_sqrt_d, cutoff);

  // model.parametrization's factor on the matrices whose fan-in grows with width (1 otherwise).
  const double in_std = (mitchell ? inv_sqrt_d : c.init_std) * shape_.hidden_init();
  const double d_ff = double(mlp_inner_size(c));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto& blk = block_list_[l];
    double attn_out_std = c.init_std * shape_.hidden_init(), ff_out_std = attn_out_std;
    if (mitchell) {
      attn_out_std = 1.0 / std::sqrt(2.0 * d * (l + 1));
      ff_out_std = 1.0 / std::sqrt(2.0 * d_ff * (l + 1));
    } else if (c.init_fn == config::InitFn::FullMegatron) {
      attn_out_std = ff_out_std = c.init_std / std::sqrt(2.0 * c.n_layers);
    }
    init_linear(blk->attn->att_proj, in_std, cutoff);
    init_linear(blk->attn->attn_out, attn_out_std, cutoff);
    for (const auto& m : blk->mlp->matrices()) {
      init_normal(m.weight, m.role == FfnRole::Output ? ff_out_std : in_std, cutoff);
      if (m.bias.defined()) {
        torch::NoGradGuard guard;
        m.bias.zero_();
      }
    }

    // Topology gains (DeepNorm's beta) on the query, key and value projections and on the
    // other projections.
    torch::NoGradGuard guard;
    const auto qkv = blk->attn->qkv_weights();
    qkv[0].mul_(topology_->init_gain(Projection::Query, l));
    qkv[1].mul_(topology_->init_gain(Projection::Key, l));
    qkv[2].mul_(topology_->init_gain(Projection::Value, l));
    blk->attn->attn_out->weight.mul_(topology_->init_gain(Projection::AttnOut, l));
    for (const auto& m : blk->mlp->matrices())
      if (m.role != FfnRole::Router)
        m.weight.mul_(
            topology_->init_gain(m.role == FfnRole::Input ? Projection::FfProj : Projection::FfOut, l));
  }
  topology_->project_weights(*this);
}

}  // namespace siamese::model
