#include "siamese/model/registry.h"

#include <fmt/format.h>

#include <functional>

#include "siamese/common/error.h"
#include "siamese/config/schema.h"

namespace siamese::model {

// Factories, one per file in src/model/topologies/.
std::shared_ptr<TopologyImpl> make_pre(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_hybrid(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_hybrid_pre(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_post(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_deepnorm(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_residual(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_peri(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_pre_embednorm(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_mixln(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_hybrid_star(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_hc(const ModelConfig&);
std::shared_ptr<TopologyImpl> make_post_pre(const ModelConfig&);

namespace {

struct Entry {
  std::string name;
  std::string description;
  std::function<std::shared_ptr<TopologyImpl>(const ModelConfig&)> make;
  std::vector<std::string> required = {};  // boolean keys the topology is defined with on
};

// HybridNorm (arXiv 2503.04598) normalizes Q, K and V per head inside attention in place
// of a norm on the attention input; its variants keep that.
const std::vector<std::string> kQkvNorms = {"model.use_query_norm", "model.use_key_norm",
                                            "model.use_value_norm"};

const std::vector<Entry>& table() {
  static const std::vector<Entry> entries = {
      {"pre", "Pre-Norm: x += F(LN(x)); out = LN_f(x)", make_pre},
      {"hybrid", "HybridNorm: x += Attn_qkvnorm(x); x = LN(x); x += FFN(x); out = LN_f(x)",
       make_hybrid, kQkvNorms},
      {"hybrid_pre",
       "SiameseNorm (HybridNorm stream X + Pre-Norm stream Y); out = LN(LN(X) + LN(Y))",
       make_hybrid_pre, kQkvNorms},
      {"post", "Post-Norm: x = LN(x + F(x)); out = x", make_post},
      {"deepnorm", "DeepNorm: x = LN(alpha x + F(x)), alpha=(2N)^1/4, init gain (8N)^-1/4", make_deepnorm},
      {"residual", "ResiDual: x = LN(x + F(x)); d += F(x); out = x + LN(d)", make_residual},
      {"peri", "Peri-LN: x += LN(F(LN(x))); out = LN_f(x)", make_peri},
      {"pre_embednorm", "Pre-Norm on RMS-normalized embeddings", make_pre_embednorm},
      {"mixln", "Mix-LN: Post-Norm for the first floor(mixln_alpha*L) layers, Pre-Norm after", make_mixln},
      {"hybrid_star", "HybridNorm*: HybridNorm with a Pre-Norm first block", make_hybrid_star, kQkvNorms},
      {"hc", "Hyper-Connections (dynamic, hc_rate streams): H = A_r^T H + B^T F(LN(A_m^T H))", make_hc},
      {"post_pre", "SiameseNorm (Post-Norm stream X + Pre-Norm stream Y); out = LN(LN(X) + LN(Y))", make_post_pre},
  };
  return entries;
}

const Entry* find(const std::string& name) {
  for (const auto& e : table())
    if (e.name == name) return &e;
  return nullptr;
}

std::string joined_names() { return fmt::format("{}", fmt::join(topology_names(), ", ")); }

}  // namespace

const std::vector<std::string>& topology_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& e : table()) n.push_back(e.name);
    return n;
  }();
  return names;
}

const std::string& topology_description(const std::string& name) {
  const Entry* e = find(name);
  if (!e) throw Error("unknown topology '" + name + "'", "model.residual",
                      "use one of: " + joined_names());
  return e->description;
}

const std::vector<std::string>& settings_required_by(const std::string& name) {
  static const std::vector<std::string> none;
  const Entry* e = find(name);
  return e ? e->required : none;
}

void apply_required_settings(ModelConfig& cfg) {
  TrainConfig probe;
  probe.model = cfg;
  for (const auto& key : settings_required_by(cfg.residual)) schema::train_field(key).ref<bool>(probe) = true;
  cfg = probe.model;
}

std::shared_ptr<TopologyImpl> make_topology(const ModelConfig& cfg) {
  const Entry* e = find(cfg.residual);
  if (!e) throw Error("unknown topology '" + cfg.residual + "'", "model.residual",
                      "use one of: " + joined_names());
  return e->make(cfg);
}

void check_model_config(const ModelConfig& cfg) {
  if (!find(cfg.residual))
    throw Error("unknown topology '" + cfg.residual + "'", "model.residual",
                "use one of: " + joined_names());
  auto positive = [](int64_t v, const char* key) {
    if (v <= 0) throw Error(fmt::format("{} must be positive, got {}", key, v), key);
  };
  positive(cfg.d_model, "model.d_model");
  positive(cfg.n_heads, "model.n_heads");
  positive(cfg.n_layers, "model.n_layers");
  positive(cfg.vocab_size, "model.vocab_size");
  positive(cfg.max_sequence_length, "model.max_sequence_length");
  if (cfg.d_model % cfg.n_heads != 0)
    throw Error(fmt::format("d_model {} is not divisible by n_heads {}", cfg.d_model, cfg.n_heads),
                "model.n_heads", "pick n_heads dividing d_model");
  if (cfg.n_kv_heads) {
    positive(*cfg.n_kv_heads, "model.n_kv_heads");
    if (cfg.n_heads % *cfg.n_kv_heads != 0)
      throw Error(fmt::format("n_heads {} is not divisible by n_kv_heads {}", cfg.n_heads,
                              *cfg.n_kv_heads),
                  "model.n_kv_heads", "pick n_kv_heads dividing n_heads (1 = multi-query)");
  }
  if (cfg.rope && (cfg.d_model / cfg.n_heads) % 2 != 0)
    throw Error("RoPE needs an even head dimension", "model.rope",
                "choose d_model / n_heads even or set rope: false");
  if (cfg.embedding_size < cfg.vocab_size)
    throw Error(fmt::format("embedding_size {} is smaller than vocab_size {}", cfg.embedding_size,
                            cfg.vocab_size),
                "model.embedding_size", "set embedding_size >= vocab_size (OLMo pads it up)");
  if (cfg.mlp_hidden_size) positive(*cfg.mlp_hidden_size, "model.mlp_hidden_size");
  else positive(cfg.mlp_ratio, "model.mlp_ratio");
  const int64_t hidden = cfg.mlp_hidden_size.value_or(cfg.mlp_ratio * cfg.d_model);
  if (cfg.activation_type == "swiglu" && hidden % 2 != 0)
    throw Error(fmt::format("SwiGLU splits the MLP hidden size in two; {} is odd", hidden),
                "model.mlp_hidden_size", "use an even hidden size");
  if (cfg.activation_type != "swiglu" && cfg.activation_type != "gelu" &&
      cfg.activation_type != "relu")
    throw Error("unknown activation_type '" + cfg.activation_type + "'", "model.activation_type",
                "use swiglu, gelu or relu");
  if (cfg.layer_norm_type != "default" && cfg.layer_norm_type != "low_precision" &&
      cfg.layer_norm_type != "rms")
    throw Error("unknown layer_norm_type '" + cfg.layer_norm_type + "'", "model.layer_norm_type",
                "use default, low_precision or rms");
  if (cfg.init_fn != "normal" && cfg.init_fn != "mitchell" && cfg.init_fn != "full_megatron")
    throw Error("unknown init_fn '" + cfg.init_fn + "'", "model.init_fn",
                "use normal, mitchell or full_megatron");
  if (cfg.block_type != "sequential")
    throw Error("block_type '" + cfg.block_type + "' is not supported", "model.block_type",
                "use sequential (the residual topology is chosen by model.residual)");
  if (cfg.attention_layer_norm && (cfg.use_query_norm || cfg.use_key_norm))
    throw Error("attention_layer_norm (full-width Q,K norms) cannot be combined with per-head "
                "use_query_norm / use_key_norm",
                "model.attention_layer_norm", "enable one of the two");
  TrainConfig probe;
  probe.model = cfg;
  for (const auto& key : settings_required_by(cfg.residual))
    if (!schema::train_field(key).ref<bool>(probe))
      throw Error("topology '" + cfg.residual + "' is defined with " + key + " on", key,
                  "set it to true, or leave it out of the config: choosing the topology turns it on");
  for (double p : {cfg.attention_dropout, cfg.residual_dropout, cfg.embedding_dropout})
    if (p < 0.0 || p >= 1.0)
      throw Error(fmt::format("dropout probability {} is outside [0, 1)", p),
                  "model.*_dropout", "use a value in [0, 1)");
}

}  // namespace siamese::model
