#include "siamese/config/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/config/device.h"
#include "siamese/config/duration.h"
#include "siamese/config/schema.h"

namespace siamese::config {
namespace {

class Rules {
 public:
  explicit Rules(const KeyLocator& where) : where_(where) {}

  std::string at(const std::string& key) const { return where_ ? where_(key) : "(" + key + ")"; }

  void require(bool ok, const std::string& key, const std::string& problem, const std::string& fix) const {
    if (!ok) throw Error(problem, at(key), fix);
  }

 private:
  const KeyLocator& where_;
};

bool inside(const schema::Bounds& b, double v) {
  if (b.min && (b.min_open ? v <= *b.min : v < *b.min)) return false;
  if (b.max && (b.max_open ? v >= *b.max : v > *b.max)) return false;
  return true;
}

// The values the schema table allows each key (its choices or bounds), in table order.
template <class Root>
void check_values(const std::vector<schema::Field<Root>>& fields, const Root& root, const std::string& prefix,
                  const Rules& r) {
  using schema::Kind;
  for (const auto& f : fields) {
    const std::string key = prefix + f.key;
    const std::string accepted = schema::accepted_text(f.bounds, f.choices);
    if (!f.choices.empty() && f.kind == Kind::String) {
      const auto& v = f.template ref<std::string>(root);
      if (std::find(f.choices.begin(), f.choices.end(), v) == f.choices.end())
        throw Error(fmt::format("{} \"{}\" is not one of: {}", key, v, accepted), r.at(key),
                    f.fix.empty() ? fmt::format("set {} to one of: {}", key, accepted) : f.fix);
      continue;
    }
    if (!f.bounds.any()) continue;
    std::vector<double> values;
    switch (f.kind) {
      case Kind::Int:
        values.push_back(double(f.template ref<int64_t>(root)));
        break;
      case Kind::Double:
        values.push_back(f.template ref<double>(root));
        break;
      case Kind::OptInt:
        if (const auto& v = f.template ref<std::optional<int64_t>>(root)) values.push_back(double(*v));
        break;
      case Kind::OptDouble:
        if (const auto& v = f.template ref<std::optional<double>>(root)) values.push_back(*v);
        break;
      case Kind::DoubleList:
        values = f.template ref<std::vector<double>>(root);
        break;
      case Kind::IntList:
        for (int64_t v : f.template ref<std::vector<int64_t>>(root)) values.push_back(double(v));
        break;
      default:
        throw std::logic_error("bounds on a key that holds no numbers: " + key);
    }
    const bool positive = f.bounds.min == 0.0 && f.bounds.min_open && !f.bounds.max;
    const std::string rule = positive                       ? "positive"
                             : f.bounds.min && f.bounds.max ? "in " + accepted
                                                            : accepted;
    for (double v : values)
      if (!inside(f.bounds, v))
        throw Error(
            fmt::format("{} must be {}, got {}", key, rule, v), r.at(key),
            f.fix.empty() ? fmt::format("set {} to a value {}", key, positive ? "> 0" : rule) : f.fix);
  }
}

// Rules between model keys.
void model_rules(const ModelConfig& m, const Rules& r) {
  r.require(m.d_model % m.n_heads == 0, "model.n_heads",
            fmt::format("model.d_model {} is not divisible by model.n_heads {}", m.d_model, m.n_heads),
            "pick n_heads that divides d_model (head size = d_model / n_heads)");
  if (m.n_kv_heads) {
    r.require(
        m.n_heads % *m.n_kv_heads == 0, "model.n_kv_heads",
        fmt::format("model.n_heads {} is not divisible by model.n_kv_heads {}", m.n_heads, *m.n_kv_heads),
        "pick n_kv_heads that divides n_heads, or null for one key/value head per query head");
    r.require(!m.multi_query_attention || *m.n_kv_heads == 1, "model.n_kv_heads",
              fmt::format("model.multi_query_attention means one key/value head, but model.n_kv_heads is {}",
                          *m.n_kv_heads),
              "set multi_query_attention: false, or n_kv_heads: 1");
  }
  r.require(!m.rope || (m.d_model / m.n_heads) % 2 == 0, "model.n_heads",
            fmt::format("RoPE needs an even head size, d_model / n_heads = {}", m.d_model / m.n_heads),
            "pick d_model and n_heads with an even d_model / n_heads");
  r.require(m.mlp_hidden_size || m.mlp_ratio > 0, "model.mlp_ratio",
            fmt::format("model.mlp_ratio must be positive, got {}", m.mlp_ratio),
            "set model.mlp_ratio to a value > 0, or set model.mlp_hidden_size");
  const int64_t hidden = m.mlp_hidden_size.value_or(m.mlp_ratio * m.d_model);
  r.require(m.activation_type != Activation::SwiGLU || hidden % 2 == 0,
            m.mlp_hidden_size ? "model.mlp_hidden_size" : "model.mlp_ratio",
            fmt::format("SwiGLU splits the MLP hidden size in two halves, but it is odd ({})", hidden),
            "make mlp_hidden_size (or mlp_ratio * d_model) even");
  r.require(
      !m.is_moe() || m.moe_top_k <= m.moe_num_experts, "model.moe_top_k",
      fmt::format("model.moe_top_k {} exceeds model.moe_num_experts {}", m.moe_top_k, m.moe_num_experts),
      "route each token to at most moe_num_experts experts");
  r.require(m.is_moe() || !m.moe_router_bias_rate, "model.moe_router_bias_rate",
            "model.moe_router_bias_rate is set, but block_type is not moe: there is no router to bias",
            "set model.block_type: moe, or remove moe_router_bias_rate");
  r.require(!m.is_moe() || m.activation_type == Activation::SwiGLU, "model.activation_type",
            fmt::format("block_type moe builds SwiGLU experts, but activation_type is {}",
                        name_of(m.activation_type)),
            "set activation_type: swiglu");
  r.require(!(m.attention_layer_norm && (m.use_query_norm || m.use_key_norm)), "model.attention_layer_norm",
            "model.attention_layer_norm (full-width Q, K norms) cannot be combined with the per-head "
            "model.use_query_norm / model.use_key_norm",
            "set one of the two false");
  for (size_t i = 0; i < m.sliding_window_pattern.size(); ++i) {
    const int64_t w = m.sliding_window_pattern[i];
    r.require(
        w == -1 || w >= 1, "model.sliding_window_pattern",
        fmt::format("model.sliding_window_pattern[{}] is {}: a window holds at least one position", i, w),
        "write a window of >= 1 positions, or -1 for full attention, e.g. [4096, 4096, 4096, -1]");
  }
  r.require(
      m.embedding_size >= m.vocab_size, "model.embedding_size",
      fmt::format("model.embedding_size {} is smaller than model.vocab_size {}", m.embedding_size,
                  m.vocab_size),
      fmt::format("set embedding_size >= vocab_size, e.g. {} (vocab_size rounded up to a multiple of 128)",
                  (m.vocab_size + 127) / 128 * 128));
}

// Model keys that matter to a run rather than to the network: the tokenizer's ids and where
// parameters are initialised.
void run_model_rules(const ModelConfig& m, const Rules& r) {
  for (const auto& [key, id] :
       {std::pair{"model.eos_token_id", m.eos_token_id}, {"model.pad_token_id", m.pad_token_id}})
    r.require(id >= 0 && id < m.embedding_size, key,
              fmt::format("{} {} is outside the embedding table [0, {})", key, id, m.embedding_size),
              "use a token id of the tokenizer below embedding_size");
  r.require(!m.residual.empty(), "model.residual", "model.residual is empty",
            "name a topology, e.g. model.residual: pre (or set MODEL_TYPE)");
}

// The model keys' own values (schema table) and then the rules between them.
void check_model(const ModelConfig& m, const Rules& r) {
  TrainConfig holder;
  holder.model = m;
  std::vector<schema::Field<TrainConfig>> model_fields;
  for (const auto& f : schema::train_fields())
    if (f.key.rfind("model.", 0) == 0) model_fields.push_back(f);
  check_values(model_fields, holder, "", r);
  model_rules(m, r);
}

void validate_optimizer(const OptimizerConfig& o, const Rules& r) {
  r.require(o.betas.size() == 2, "optimizer.betas",
            fmt::format("optimizer.betas needs two values, got {}", o.betas.size()),
            "write betas: [0.9, 0.95]");
  // AdamW applies lr / (1 - beta1) (its first step) and lr * weight_decay to float32
  // weights, Muon lr * weight_decay; past float32's range LibTorch fails mid-step with an
  // overflow error.
  const double step = std::max(o.learning_rate / (1 - o.betas.front()), o.learning_rate * o.weight_decay);
  r.require(step <= std::numeric_limits<float>::max(), "optimizer.learning_rate",
            fmt::format("optimizer.learning_rate {} is too large for float32 weights: AdamW's first "
                        "step would be {:.3g} (float32 ends at 3.4e38)",
                        o.learning_rate, step),
            "use a learning rate such as 1e-3");
  const double muon_decay =
      o.muon.learning_rate.value_or(o.learning_rate) * o.muon.weight_decay.value_or(o.weight_decay);
  r.require(o.name != OptimizerName::Muon || muon_decay <= std::numeric_limits<float>::max(),
            "optimizer.muon.learning_rate",
            fmt::format("Muon's lr * weight_decay {:.3g} is too large for float32 weights (float32 ends at "
                        "3.4e38)",
                        muon_decay),
            "use a learning rate such as 1e-3");
  for (size_t i = 0; i < o.group_overrides.size(); ++i) {
    const GroupOverrideConfig& g = o.group_overrides[i];
    const std::string p = "optimizer.group_overrides[" + std::to_string(i) + "].";
    check_values(schema::group_override_fields(), g, p, r);
    r.require(!g.params.empty(), p + "params", p + "params is empty",
              "name the parameters, e.g. params: [wte.weight] (globs such as blocks.*.attn.* too)");
    r.require(!(g.lr && g.lr_multiplier), p + "opts.lr", p + "opts.lr and opts.lr_multiplier are both set",
              "set one of the two");
    r.require(!(g.weight_decay && g.weight_decay_multiplier), p + "opts.weight_decay",
              p + "opts.weight_decay and opts.weight_decay_multiplier are both set", "set one of the two");
    r.require(g.betas.empty() || g.betas.size() == 2, p + "opts.betas",
              fmt::format("{}opts.betas needs two values, got {}", p, g.betas.size()),
              "write betas: [0.9, 0.95]");
  }
}

// OLMo-core's SourceMixtureConfig and SourceMixtureList checks, plus what the mixture needs
// from the run: no data.paths beside it and a length that is not in epochs of itself.
void validate_mixture(const TrainConfig& c, const Rules& r) {
  const auto& sources = c.data.source_mixture;
  if (sources.empty()) return;
  double sum = 0;
  std::set<std::string> names;
  for (size_t i = 0; i < sources.size(); ++i) {
    const MixtureSourceConfig& s = sources[i];
    const std::string p = "data.source_mixture[" + std::to_string(i) + "].";
    check_values(schema::mixture_source_fields(), s, p, r);
    r.require(!s.source_name.empty(), p + "source_name", p + "source_name is empty",
              "name the source, e.g. web");
    r.require(names.insert(s.source_name).second, p + "source_name",
              fmt::format("two sources are named {}", s.source_name), "give each source its own name");
    r.require(!s.paths.empty(), p + "paths", p + "paths is empty", "list the source's token files");
    sum += s.target_ratio;
  }
  // numpy.allclose(sum, 1.0), as OLMo-core tests it.
  r.require(std::abs(sum - 1.0) <= 1e-8 + 1e-5, "data.source_mixture",
            fmt::format("the target_ratio of the sources sum to {:.6g}, not 1", sum),
            "make the target ratios add up to 1");
  r.require(c.data.paths.empty(), "data.paths", "data.paths and data.source_mixture are both set",
            "list the files under one of the sources, or drop data.source_mixture");
  r.require(c.data.synthetic == SyntheticCorpus::None, "data.synthetic",
            "data.synthetic and data.source_mixture are both set",
            "drop one of the two (data.synthetic: \"\")");
  r.require(c.max_duration.unit() != Duration::Epochs, "max_duration",
            fmt::format("max_duration {} is in epochs, which a mixture is sized from", c.max_duration.text()),
            "give max_duration in steps or tokens (e.g. 2e9T)");
}

void validate_data(const TrainConfig& c, const Rules& r) {
  validate_mixture(c, r);
  r.require(!c.data.rope_restart_per_document || (c.data.generate_doc_lengths && c.model.rope),
            "data.rope_restart_per_document",
            "data.rope_restart_per_document needs data.generate_doc_lengths: true and model.rope: true",
            "turn on data.generate_doc_lengths (and model.rope), or drop rope_restart_per_document");
  const auto& f = c.data.instance_filter;
  r.require(!f.enabled() || f.min_period() <= f.max_period(), "data.instance_filter.repetition_min_period",
            fmt::format("data.instance_filter.repetition_min_period {} exceeds repetition_max_period {}",
                        f.min_period(), f.max_period()),
            "set repetition_min_period <= repetition_max_period (OLMo: 1 and 13)");
  r.require(!c.tokenizer.identifier.empty(), "tokenizer.identifier", "tokenizer.identifier is empty",
            "name a tokenizer.json file or a known tokenizer");
  std::set<std::string> labels;
  for (size_t i = 0; i < c.evaluators.size(); ++i) {
    const auto& e = c.evaluators[i];
    const std::string p = "evaluators[" + std::to_string(i) + "].";
    r.require(!e.label.empty(), p + "label", p + "label is empty", "give every evaluator a label");
    r.require(labels.insert(e.label).second, p + "label", "two evaluators are labelled \"" + e.label + "\"",
              "give every evaluator its own label");
    check_values(schema::evaluator_fields(), e, p, r);
    r.require(e.subset_num_batches >= -1 && e.subset_num_batches != 0, p + "subset_num_batches",
              fmt::format("{}subset_num_batches must be -1 or positive, got {}", p, e.subset_num_batches),
              "use -1 for the whole set");
  }
}

}  // namespace

void validate_model(const ModelConfig& model, const KeyLocator& where) { check_model(model, Rules(where)); }

void validate(const TrainConfig& c, const KeyLocator& where) {
  const Rules r(where);
  check_values(schema::train_fields(), c, "", r);
  r.require(c.eval_subset_num_batches >= -1 && c.eval_subset_num_batches != 0, "eval_subset_num_batches",
            fmt::format("eval_subset_num_batches must be -1 or positive, got {}", c.eval_subset_num_batches),
            "use -1 for whole evaluation sets");
  const SchedulerConfig& sc = c.scheduler;
  for (const auto& [key, set] : {std::pair<const char*, bool>{"scheduler.t_decay", sc.t_decay.has_value()},
                                 {"scheduler.decay_fraction", sc.decay_fraction.has_value()},
                                 {"scheduler.decay_shape", sc.decay_shape != DecayShape::Linear}})
    r.require(!set || sc.name == SchedulerName::Wsd, key,
              std::string(key) + " is set, but scheduler.name " + name_of(sc.name) +
                  " has no decay phase to read it",
              "set scheduler.name: wsd, or remove " + std::string(key));
  r.require(!(sc.t_decay && sc.decay_fraction), "scheduler.t_decay",
            "scheduler.t_decay and scheduler.decay_fraction are both set",
            "set one of the two (as OLMo-core's WSD)");
  int exponent = 0;  // a power of two keeps scaling and unscaling exact
  const bool power_of_two = std::frexp(c.fp16_initial_loss_scale, &exponent) == 0.5;
  r.require(power_of_two && c.fp16_initial_loss_scale >= 1 && c.fp16_initial_loss_scale <= 0x1p100,
            "fp16_initial_loss_scale",
            fmt::format("fp16_initial_loss_scale must be a power of two in [1, 2^100], got {}",
                        c.fp16_initial_loss_scale),
            "use a power of two such as 65536 (2^16, the default)");
  model_rules(c.model, r);
  run_model_rules(c.model, r);
  validate_optimizer(c.optimizer, r);
  validate_data(c, r);
}

void validate_for_world_size(const TrainConfig& c, int world_size, const KeyLocator& where) {
  const Rules r(where);
  if (world_size < 1)
    throw Error(fmt::format("world size {} is not positive", world_size), "WORLD_SIZE",
                "launch with torchrun or unset WORLD_SIZE");
  const int64_t global = c.global_train_batch_size;
  r.require(global % world_size == 0, "global_train_batch_size",
            fmt::format("global_train_batch_size {} does not split over world size {}", global, world_size),
            fmt::format("use a multiple of {}", world_size));
  // As in OLMo, a micro-batch larger than a rank's share is capped at that share.
  const int64_t per_rank = global / world_size;
  const int64_t micro = std::min(c.device_train_microbatch_size, per_rank);
  r.require(per_rank % micro == 0, "device_train_microbatch_size",
            fmt::format("each rank gets global_train_batch_size {} / world size {} = {} sequences, "
                        "which device_train_microbatch_size {} does not divide",
                        global, world_size, per_rank, micro),
            fmt::format("pick a microbatch size that divides {}, or a global batch that is a multiple "
                        "of {}",
                        per_rank, world_size * micro));
}

}  // namespace siamese::config
