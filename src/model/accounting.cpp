#include "siamese/model/accounting.h"

#include <algorithm>

#include "siamese/model/attention.h"
#include "siamese/model/mlp.h"
#include "siamese/model/olmo_names.h"
#include "siamese/model/topology_table.h"

namespace siamese::model {

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
       p.local == "ff_out.weight" || p.local == "router.weight" || p.local == "experts.ff_proj" ||
       p.local == "experts.ff_out"))
    return ParamKind::Linear;
  return ParamKind::Norm;
}

bool is_topology_tensor(const std::string& name) {
  const ParamName p = parse_param_name(name);
  return p.owner == ParamName::Owner::Topology && p.local.find('.') == std::string::npos;
}

// From the shapes the modules create (attention.cpp, mlp.cpp, norm.cpp), so counting builds
// no block and leaves the generator as it found it: a resumed run logs the count after
// restoring it. The topology's own parameters come from building it, since each topology
// decides them; some draw their init (mhc's projections), so the generator's state is put back.
ParamCounts count_parameters(const config::ModelConfig& cfg) {
  check_model_config(cfg);
  const int64_t d = cfg.d_model, head_dim = d / cfg.n_heads;
  const int64_t kv = kv_head_count(cfg) * head_dim;
  auto linear = [&](int64_t in, int64_t out) { return in * out + (cfg.include_bias ? out : 0); };
  auto qkv_norm = [&](int64_t dim) {
    return norm_parameter_count(cfg, dim, cfg.attention_layer_norm_with_affine);
  };

  ParamCounts c;
  c.embedding = cfg.embedding_size * d + (cfg.rope ? 0 : cfg.max_sequence_length * d);
  if (cfg.embedding_layer_norm) c.embedding += norm_parameter_count(cfg, d);
  int64_t attention = linear(d, d + 2 * kv) + linear(d, d);
  if (cfg.attention_layer_norm) attention += qkv_norm(d) + qkv_norm(kv);
  for (bool on : {cfg.use_query_norm, cfg.use_key_norm, cfg.use_value_norm})
    if (on) attention += qkv_norm(head_dim);
  c.attention = cfg.n_layers * attention;
  const int64_t expert = linear(d, mlp_hidden_size(cfg)) + linear(mlp_inner_size(cfg), d);
  if (cfg.is_moe()) {
    // The stacked experts have no biases; the router is a bias-free [experts, d] matrix.
    const int64_t routed = d * mlp_hidden_size(cfg) + mlp_inner_size(cfg) * d;
    const int64_t shared = cfg.moe_shared_expert ? expert : 0;
    c.mlp = cfg.n_layers * (d * cfg.moe_num_experts + cfg.moe_num_experts * routed + shared);
    c.mlp_active = cfg.n_layers * (d * cfg.moe_num_experts + cfg.moe_top_k * routed + shared);
  } else {
    c.mlp = c.mlp_active = cfg.n_layers * expert;
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const auto state = generator.get_state();
  for (const auto& p : make_topology(cfg)->parameters()) c.residual += p.numel();
  generator.set_state(state);
  if (!cfg.weight_tying) c.head = cfg.embedding_size * (d + (cfg.include_bias ? 1 : 0));
  return c;
}

double flops_per_token(const config::ModelConfig& cfg, int64_t seq_len) {
  const double d = double(cfg.d_model);
  const double kv = double(kv_head_count(cfg) * (cfg.d_model / cfg.n_heads));
  const double router = cfg.is_moe() ? d * double(cfg.moe_num_experts) : 0.0;
  const double per_layer =
      d * (d + 2 * kv) + d * d + router +
      double(active_experts(cfg)) * (d * double(mlp_hidden_size(cfg)) + double(mlp_inner_size(cfg)) * d);
  const double n_matmul = double(cfg.n_layers) * per_layer + d * double(cfg.embedding_size);
  double keys = 0.0;  // keys per query, summed over layers
  for (int64_t l = 0; l < cfg.n_layers; ++l)
    keys += double(std::min(seq_len, attention_window(cfg, l).value_or(seq_len)));
  return 6.0 * n_matmul + 12.0 * d * keys;
}

double mfu(double tokens_per_second, double flops_per_token, double peak_flops) {
  return tokens_per_second * flops_per_token / peak_flops;
}

StateBytes training_state_parts(const config::ModelConfig& cfg) {
  const double d = double(cfg.d_model), kv = double(kv_head_count(cfg)) * (d / double(cfg.n_heads));
  const double experts = cfg.is_moe() ? double(cfg.moe_num_experts + (cfg.moe_shared_expert ? 1 : 0)) : 1.0;
  const double router = cfg.is_moe() ? d * double(cfg.moe_num_experts) : 0.0;
  const double layers = double(cfg.n_layers), bytes = 16.0;
  StateBytes s;
  s.attention = bytes * layers * (d * (d + 2 * kv) + d * d);
  s.mlp = bytes * layers *
          (router + experts * (d * double(mlp_hidden_size(cfg)) + double(mlp_inner_size(cfg)) * d));
  s.embedding = bytes * (double(cfg.embedding_size) * d * (cfg.weight_tying ? 1 : 2) +
                         (cfg.rope ? 0.0 : double(cfg.max_sequence_length) * d));
  return s;
}

double training_state_bytes(const config::ModelConfig& cfg) { return training_state_parts(cfg).total(); }

}  // namespace siamese::model
