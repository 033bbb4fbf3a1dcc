#pragma once
// The residual topologies (the MODEL_TYPE values) in one table, and the lookups over it.
// The seam every row implements is topology.h. Adding a topology = one file in
// src/model/topologies/ (its factory) + one row here (+ docs/architecture.md's catalogue and
// python/modeling_siamese.py's twin for the Hugging Face export).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/config/load.h"
#include "siamese/model/topology.h"

namespace siamese::model {

std::shared_ptr<TopologyImpl> make_pre(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_hybrid(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_hybrid_pre(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_post(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_deepnorm(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_residual(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_peri(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_pre_embednorm(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_mixln(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_hybrid_star(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_hc(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_post_pre(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_reordered(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_lns(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_ngpt(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_mhc(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_mhc_lite(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_siamese(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_attnres(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_speedrun(const config::ModelConfig&);
std::shared_ptr<TopologyImpl> make_dca(const config::ModelConfig&);

// A boolean model setting: its YAML key (for messages and the config's origins) and the
// member it sets. A test checks that the two name the same setting (schema.h).
struct Flag {
  std::string key;
  bool config::ModelConfig::*member;
};

// An integer model setting and the value a topology gives it by default.
struct IntDefault {
  std::string key;
  int64_t config::ModelConfig::*member;
  int64_t value;
};

struct TopologySpec {
  std::string name;
  std::string description;  // its update rule, for --help, inspect and docs
  std::shared_ptr<TopologyImpl> (*make)(const config::ModelConfig&);
  // Settings the topology is defined with on; choosing it turns them on, and a config that
  // sets one off is refused.
  std::vector<Flag> required;
  // State::names of its residual streams, which analyses and probes read (hc, mhc: one per
  // model.hc_rate, shown at the topology's default).
  std::vector<std::string> streams;
  // The model.* keys of topologies that it reads (of those only some rows read): a config
  // that sets one its topology does not read is warned of (check_model_config).
  std::vector<std::string> reads = {};
  // Settings whose default differs for this topology (mhc's 4 streams): a config file that
  // does not set one gets this value.
  std::vector<IntDefault> defaults = {};
  // Another row whose required settings this row needs too (siamese: the placement its X
  // stream takes, model.siamese.x_stream).
  std::string (*requires_as)(const config::ModelConfig&) = nullptr;
  // Its project_weights rewrites whole weight matrices after every step (nGPT): a plan that
  // holds parameter shards refuses it (train::check_plan_fits_model).
  bool projects_weights = false;
  // Why model.parametrization completep (or any non-standard one) has no rule for this row;
  // empty where it has one (model/parametrization.h).
  std::string no_depth_rule = "";
  std::string no_width_rule = "";
};

// A row whose residual path has no depth rule (completep), for the reason given.
inline TopologySpec without_depth_rule(TopologySpec row, std::string why) {
  row.no_depth_rule = std::move(why);
  return row;
}

// Norms after the residual add reset the stream's scale at every such sublayer: no residual
// sum grows with depth for a branch multiplier to bound (CompleteP's rule is derived for
// Pre-LN).
inline const std::string kPostNormDepth =
    "a norm after the residual add resets the stream's scale, so no residual sum grows with depth for "
    "depth^-alpha to bound (CompleteP's rule is derived for Pre-LN)";
inline const std::string kSiameseDepth =
    "stream X is normalized after each add and SiameseNorm divides its updates by c_l = sqrt(2(l+1)) "
    "(model.siamese.depth_scaling), a depth rule of its own; none is derived for the pair";

// HybridNorm (arXiv 2503.04598) normalizes Q, K and V per head inside attention in place of
// a norm on the attention input; its variants keep that.
inline const std::vector<Flag> kQkvNorms = {{"model.use_query_norm", &config::ModelConfig::use_query_norm},
                                            {"model.use_key_norm", &config::ModelConfig::use_key_norm},
                                            {"model.use_value_norm", &config::ModelConfig::use_value_norm}};

// What every SiameseNorm row reads; post_pre and hybrid_pre fix x_stream, and a config may
// repeat their placement there.
inline const std::vector<std::string> kSiameseSettings = {"model.siamese.depth_scaling",
                                                          "model.siamese.fused_input_norm",
                                                          "model.siamese.gamma", "model.siamese.x_stream"};

inline const std::vector<TopologySpec>& topologies() {
  static const std::vector<TopologySpec> table = {
      {"pre", "Pre-Norm: x += F(LN(x)); out = LN_f(x)", make_pre, {}, {"x"}},
      without_depth_rule({"hybrid",
                          "HybridNorm: x += Attn_qkvnorm(x); x = LN(x); x += FFN(x); out = LN_f(x)",
                          make_hybrid,
                          kQkvNorms,
                          {"x"}},
                         kPostNormDepth),
      without_depth_rule({"hybrid_pre",
                          "SiameseNorm (HybridNorm stream X + Pre-Norm stream Y); out = LN(LN(X) + LN(Y))",
                          make_hybrid_pre,
                          kQkvNorms,
                          {"x", "y"},
                          kSiameseSettings},
                         kSiameseDepth),
      without_depth_rule({"post", "Post-Norm: x = LN(x + F(x)); out = x", make_post, {}, {"x"}},
                         kPostNormDepth),
      without_depth_rule({"deepnorm",
                          "DeepNorm: x = LN(alpha x + F(x)), alpha=(2N)^1/4, init gain (8N)^-1/4",
                          make_deepnorm,
                          {},
                          {"x"}},
                         kPostNormDepth),
      without_depth_rule({"residual",
                          "ResiDual: x = LN(x + F(x)); d += F(x); out = x + LN(d)",
                          make_residual,
                          {},
                          {"x", "d"}},
                         kPostNormDepth),
      {"peri", "Peri-LN: x += LN(F(LN(x))); out = LN_f(x)", make_peri, {}, {"x"}},
      {"pre_embednorm", "Pre-Norm on RMS-normalized embeddings", make_pre_embednorm, {}, {"x"}},
      without_depth_rule({"mixln",
                          "Mix-LN: Post-Norm for the first floor(mixln_alpha*L) layers, Pre-Norm after",
                          make_mixln,
                          {},
                          {"x"},
                          {"model.mixln_alpha"}},
                         kPostNormDepth),
      without_depth_rule({"hybrid_star",
                          "HybridNorm*: HybridNorm with a Pre-Norm first block",
                          make_hybrid_star,
                          kQkvNorms,
                          {"x"}},
                         kPostNormDepth),
      {"hc",
       "Hyper-Connections (dynamic, hc_rate streams): H = A_r^T H + B^T F(LN(A_m^T H))",
       make_hc,
       {},
       {"h0", "h1"},
       {"model.hc_rate", "model.hc_dynamic"}},
      without_depth_rule({"post_pre",
                          "SiameseNorm (Post-Norm stream X + Pre-Norm stream Y); out = LN(LN(X) + LN(Y))",
                          make_post_pre,
                          {},
                          {"x", "y"},
                          kSiameseSettings},
                         kSiameseDepth),
      {"reordered",
       "OLMo-2 reordered norm: x += LN(F_qknorm(x)); out = LN_f(x)",
       make_reordered,
       {{"model.attention_layer_norm", &config::ModelConfig::attention_layer_norm}},
       {"x"}},
      {"lns", "LayerNorm Scaling: x += F(LN(x) / sqrt(layer)); out = LN_f(x)", make_lns, {}, {"x"}},
      {"ngpt",
       "nGPT: x = Norm(x + alpha (Norm(F(x)) - x)), unit-norm weight rows; logits s_z W x",
       make_ngpt,
       {},
       {"x"},
       {},
       {},
       {},
       true,
       "its stream stays on the unit sphere and moves by a learned interpolation, not a residual sum",
       "its weight rows are renormalized after every step and its learned scales (s_qk, s_u, s_v, s_z, "
       "alpha) are its own width rule"},
      {"mhc",
       "mHC (hc_rate streams): H = comb^T H + post^T F(LN(pre . H)), comb Sinkhorn-projected",
       make_mhc,
       {},
       {"h0", "h1", "h2", "h3"},
       {"model.hc_rate", "model.mhc_sinkhorn_iters", "model.mhc_eps", "model.mhc_post_scale"},
       {{"model.hc_rate", &config::ModelConfig::hc_rate, 4}}},
      {"mhc_lite",
       "mHC-lite: mHC with comb = sum_k softmax(.)_k P_k over the n! permutations",
       make_mhc_lite,
       {},
       {"h0", "h1", "h2", "h3"},
       {"model.hc_rate", "model.mhc_eps", "model.mhc_post_scale"},
       {{"model.hc_rate", &config::ModelConfig::hc_rate, 4}}},
      without_depth_rule({"siamese",
                          "SiameseNorm: Pre-Norm stream Y + stream X placed as model.siamese.x_stream; out = "
                          "LN(LN(X) + LN(Y))",
                          make_siamese,
                          {},
                          {"x", "y"},
                          kSiameseSettings,
                          {},
                          [](const config::ModelConfig& c) { return config::name_of(c.siamese.x_stream); }},
                         kSiameseDepth),
      without_depth_rule(
          {"attnres",
           "Attention Residuals: F_s(LN(sum_i softmax_i(w_s . RMS(v_i)) v_i)) over v_0 = embeddings and "
           "earlier "
           "outputs (or block sums: attnres_block_size)",
           make_attnres,
           {},
           {"v0"},
           {"model.attnres_block_size"}},
          "a sublayer reads a softmax-weighted average of earlier outputs, not a residual sum"),
      {"speedrun",
       "Speedrun (nanochat): x0 = RMS(emb); per block x = r_l x + a_l x0, x += F(LN(x)); "
       "out = LN_f(x - b x_mid), x_mid after block L/2; r, a, b learned",
       make_speedrun,
       {},
       {"x", "x0"}},
      without_depth_rule(
          {"dca",
           "DeepCrossAttention: q, k, v = GRN_l(Y), GRN_o(Y) = sum_i y_i (relu(w_o . LN(y_i)) + b_o,i) over "
           "the "
           "first and last dca_past_layers of y_0 = embeddings, y_j = Attn(LN q, LN k, LN v) + MLP(LN(Attn + "
           "q)); "
           "out = LN_f(GRN_f(Y))",
           make_dca,
           {},
           {"y0"},
           {"model.dca_past_layers"}},
          "a block reads a learned combination of earlier block outputs, not a residual sum"),
  };
  return table;
}

// The row of `name`, or nullptr.
const TopologySpec* find_topology(const std::string& name);

// Lookups.

// Registered topology names, in table order.
const std::vector<std::string>& topology_names();

// One-line description of a topology (its update rule), for --help and inspect.
const std::string& topology_description(const std::string& name);

// The table as Markdown (name, streams, settings it turns on, update rule), the end of
// `siamese config --schema` and of docs/configuration.md.
std::string topologies_markdown();

// Builds cfg.residual's topology after check_model_config.
std::shared_ptr<TopologyImpl> make_topology(const config::ModelConfig& cfg);

// A model config this code can build: a known topology (the error lists the names), the
// settings it requires on, and validate_model (config/validate.h). Throws siamese::Error
// naming the model.* key and the fix; with `origin` (a config file's), the error names
// where the user set the topology or the setting.
void check_model_config(const config::ModelConfig& cfg, const config::ConfigOrigin* origin = nullptr);

// The settings topology `name` is defined with on (HybridNorm's per-head Q/K/V norms); empty
// for most topologies and unknown names.
const std::vector<Flag>& settings_required_by(const std::string& name);
// Turns those settings on in `cfg` (configs built in code; a config file goes through
// load_run_config, which turns on those the user did not set and refuses one set off).
void apply_required_settings(config::ModelConfig& cfg);

// Sets the integer keys whose default `cfg.residual`'s row changes (mhc's model.hc_rate 4),
// for configs built in code (none for an unknown name); load_run_config does it for the keys
// a config file leaves out.
void apply_topology_defaults(config::ModelConfig& cfg);

// load_config (config/load.h) plus what only the topology table knows: model.residual must
// name a row, whose required settings are turned on unless the user set them, and refused
// when set off. Errors name where the user chose the topology or the setting. Logs the
// effective topology and where it came from (YAML, MODEL_TYPE or an override).
config::TrainConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                                    const config::LaunchSettings& launch);

}  // namespace siamese::model
