#include "siamese/model/transformer.h"

#include <cmath>

#include "siamese/model/activation_checkpoint.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/registry.h"

namespace siamese::model {

BlockImpl::BlockImpl(const ModelConfig& cfg) {
  attn = register_module("attn", Attention(cfg));
  mlp = register_module("mlp", Mlp(cfg));
}

TransformerImpl::TransformerImpl(const ModelConfig& cfg) : cfg_(cfg) {
  check_model_config(cfg);
  wte = register_module("wte", torch::nn::Embedding(cfg.embedding_size, cfg.d_model));
  if (!cfg.rope) wpe = register_module("wpe", torch::nn::Embedding(cfg.max_sequence_length, cfg.d_model));
  if (cfg.embedding_layer_norm) emb_norm = register_module("emb_norm", make_norm(cfg, cfg.d_model));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layers; ++i) {
    block_list_.emplace_back(cfg);
    blocks->push_back(block_list_.back());
  }
  topology_ = register_module("topology", make_topology(cfg));
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
    if (is_training() && !opts.sublayer_probe && !opts.cache &&
        checkpoints_block(cfg_.activation_checkpointing, l)) {
      // The closure outlives this call (backward runs it again): it holds copies only.
      st.streams =
          checkpointed(st.streams, [this, names = st.names, l](const std::vector<torch::Tensor>& in) {
            State block_state{names, in};
            run_block(block_state, l, nullptr, nullptr);
            return block_state.streams;
          });
    } else {
      run_block(st, l, opts.sublayer_probe, opts.cache ? &opts.cache->layers[l] : nullptr);
    }
    report(l, st);
  }
  auto h = topology_->finish(st);
  if (opts.probe) (*opts.probe)(n, "final", h);
  return h;
}

void TransformerImpl::run_block(State& st, int64_t layer, const Probe* sublayer_probe, LayerCache* cache) {
  auto& block = block_list_[layer];
  for (int64_t s = 2 * layer; s < 2 * layer + 2; ++s) {
    const bool attention = TopologyImpl::is_attention(s);
    auto in = topology_->enter(st, s);
    auto out = attention ? block->attn(in, cache) : block->mlp(in);
    if (sublayer_probe) {
      (*sublayer_probe)(layer, attention ? "attn_in" : "ffn_in", in);
      (*sublayer_probe)(layer, attention ? "attn_out" : "ffn_out", out);
    }
    topology_->leave(st, torch::dropout(out, cfg_.residual_dropout, is_training()), s);
  }
}

torch::Tensor TransformerImpl::head(const torch::Tensor& h) {
  auto logits = cfg_.weight_tying ? torch::linear(h, wte->weight) : ff_out(h);
  return cfg_.scale_logits ? logits / std::sqrt(double(cfg_.d_model)) : logits;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& input_ids) { return head(hidden(input_ids)); }

torch::Tensor TransformerImpl::forward(const torch::Tensor& input_ids, const ForwardOptions& opts) {
  return head(hidden(input_ids, opts));
}

void TransformerImpl::use_reference_attention(bool on) {
  for (auto& b : block_list_) b->attn->use_reference_kernel(on);
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
  const bool normal = c.init_fn == "normal", mitchell = c.init_fn == "mitchell";
  const std::optional<double> cutoff =
      normal ? c.init_cutoff_factor : std::optional<double>(c.init_cutoff_factor.value_or(3.0));

  double wte_std = normal ? c.init_std : mitchell ? inv_sqrt_d : c.init_std;
  if (c.emb_init_std)
    wte_std = *c.emb_init_std;
  else if (c.init_fn == "full_megatron" && c.scale_emb_init)
    wte_std *= std::sqrt(d);
  init_normal(wte->weight, wte_std, cutoff);
  if (wpe) init_normal(wpe->weight, mitchell ? inv_sqrt_d : c.init_std, cutoff);
  if (ff_out) init_linear(ff_out, normal ? c.init_std : inv_sqrt_d, cutoff);

  const double in_std = mitchell ? inv_sqrt_d : c.init_std;
  const double d_ff = double(mlp_inner_size(c));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto& blk = block_list_[l];
    double attn_out_std = c.init_std, ff_out_std = c.init_std;
    if (mitchell) {
      attn_out_std = 1.0 / std::sqrt(2.0 * d * (l + 1));
      ff_out_std = 1.0 / std::sqrt(2.0 * d_ff * (l + 1));
    } else if (c.init_fn == "full_megatron") {
      attn_out_std = ff_out_std = c.init_std / std::sqrt(2.0 * c.n_layers);
    }
    init_linear(blk->attn->att_proj, in_std, cutoff);
    init_linear(blk->attn->attn_out, attn_out_std, cutoff);
    init_linear(blk->mlp->ff_proj, in_std, cutoff);
    init_linear(blk->mlp->ff_out, ff_out_std, cutoff);

    // Topology gains (DeepNorm's beta) on the query, key and value projections and on the
    // other projections.
    torch::NoGradGuard guard;
    const auto qkv = blk->attn->qkv_weights();
    qkv[0].mul_(topology_->init_gain(Projection::Query, l));
    qkv[1].mul_(topology_->init_gain(Projection::Key, l));
    qkv[2].mul_(topology_->init_gain(Projection::Value, l));
    blk->attn->attn_out->weight.mul_(topology_->init_gain(Projection::AttnOut, l));
    blk->mlp->ff_proj->weight.mul_(topology_->init_gain(Projection::FfProj, l));
    blk->mlp->ff_out->weight.mul_(topology_->init_gain(Projection::FfOut, l));
  }
}

ParamKind param_kind(const std::string& name) {
  using Owner = ParamName::Owner;
  const ParamName p = parse_param_name(name);
  const auto ends_with = [&](const std::string& suffix) {
    return p.local.size() >= suffix.size() &&
           p.local.compare(p.local.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (p.owner == Owner::Embedding && p.local.rfind("emb_norm.", 0) != 0) return ParamKind::Embedding;
  if (ends_with(".bias")) return ParamKind::Bias;
  if (p.owner == Owner::Head) return ParamKind::Linear;
  if ((p.owner == Owner::Attention || p.owner == Owner::Mlp) &&
      (p.local == "att_proj.weight" || p.local == "attn_out.weight" || p.local == "ff_proj.weight" ||
       p.local == "ff_out.weight"))
    return ParamKind::Linear;
  return ParamKind::Norm;
}

const char* param_kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::Embedding:
      return "embedding";
    case ParamKind::Linear:
      return "linear";
    case ParamKind::Norm:
      return "norm";
    case ParamKind::Bias:
      return "bias";
  }
  return "?";
}

// From the shapes the modules create (attention.cpp, mlp.cpp, norm.cpp), so counting builds
// no block and draws nothing from the generator: a resumed run logs the count after
// restoring it. The topology's own parameters (norm vectors, gains: no random init) come from
// building it, since each topology decides them.
ParamCounts count_parameters(const ModelConfig& cfg) {
  check_model_config(cfg);
  const int64_t d = cfg.d_model, head_dim = d / cfg.n_heads;
  const int64_t kv = (cfg.multi_query_attention ? 1 : cfg.n_kv_heads.value_or(cfg.n_heads)) * head_dim;
  const bool norm_bias = cfg.bias_for_layer_norm.value_or(cfg.include_bias);
  auto norm = [](int64_t dim, bool affine, bool bias) { return affine ? dim * (bias ? 2 : 1) : 0; };
  auto linear = [&](int64_t in, int64_t out) { return in * out + (cfg.include_bias ? out : 0); };
  auto qkv_norm = [&](int64_t dim) { return norm(dim, cfg.attention_layer_norm_with_affine, norm_bias); };

  ParamCounts c;
  c.embedding = cfg.embedding_size * d + (cfg.rope ? 0 : cfg.max_sequence_length * d);
  if (cfg.embedding_layer_norm) c.embedding += norm(d, cfg.layer_norm_with_affine, norm_bias);
  int64_t attention = linear(d, d + 2 * kv) + linear(d, d);
  if (cfg.attention_layer_norm) attention += qkv_norm(d) + qkv_norm(kv);
  for (bool on : {cfg.use_query_norm, cfg.use_key_norm, cfg.use_value_norm})
    if (on) attention += qkv_norm(head_dim);
  c.attention = cfg.n_layers * attention;
  c.mlp = cfg.n_layers * (linear(d, mlp_hidden_size(cfg)) + linear(mlp_inner_size(cfg), d));
  for (const auto& p : make_topology(cfg)->parameters()) c.residual += p.numel();
  if (!cfg.weight_tying) c.head = cfg.embedding_size * (d + (cfg.include_bias ? 1 : 0));
  return c;
}

double flops_per_token(const ModelConfig& cfg, int64_t seq_len) {
  const double d = double(cfg.d_model);
  const int64_t kv_heads = cfg.multi_query_attention ? 1 : cfg.n_kv_heads.value_or(cfg.n_heads);
  const double kv = double(kv_heads * (cfg.d_model / cfg.n_heads));
  const double per_layer =
      d * (d + 2 * kv) + d * d + d * double(mlp_hidden_size(cfg)) + double(mlp_inner_size(cfg)) * d;
  const double n_matmul = double(cfg.n_layers) * per_layer + d * double(cfg.embedding_size);
  return 6.0 * n_matmul + 12.0 * double(cfg.n_layers) * d * double(seq_len);
}

double mfu(double tokens_per_second, double flops_per_token, double peak_flops) {
  return tokens_per_second * flops_per_token / peak_flops;
}

}  // namespace siamese::model
