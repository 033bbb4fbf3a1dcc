#include "siamese/config/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/config/duration.h"

namespace siamese {
namespace {

class Rules {
 public:
  explicit Rules(const KeyLocator& where) : where_(where) {}

  std::string at(const std::string& key) const { return where_ ? where_(key) : "(" + key + ")"; }

  void require(bool ok, const std::string& key, const std::string& problem, const std::string& fix) const {
    if (!ok) throw Error(problem, at(key), fix);
  }

  void one_of(const std::string& key, const std::string& value, const std::vector<std::string>& allowed) const {
    if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return;
    throw Error(fmt::format("{} \"{}\" is not one of: {}", key, value, fmt::join(allowed, ", ")), at(key),
                fmt::format("set {} to one of: {}", key, fmt::join(allowed, ", ")));
  }

  template <class T>
  void positive(const std::string& key, T value) const {
    require(value > 0, key, fmt::format("{} must be positive, got {}", key, value),
            fmt::format("set {} to a value > 0", key));
  }

  void probability(const std::string& key, double value) const {
    require(value >= 0 && value < 1, key, fmt::format("{} must be in [0, 1), got {}", key, value),
            fmt::format("set {} to a value in [0, 1), e.g. 0.0", key));
  }

 private:
  const KeyLocator& where_;
};

void validate_model(const ModelConfig& m, const Rules& r) {
  r.positive("model.d_model", m.d_model);
  r.positive("model.n_heads", m.n_heads);
  r.positive("model.n_layers", m.n_layers);
  r.positive("model.max_sequence_length", m.max_sequence_length);
  r.positive("model.vocab_size", m.vocab_size);
  r.require(m.d_model % m.n_heads == 0, "model.n_heads",
            fmt::format("model.d_model {} is not divisible by model.n_heads {}", m.d_model, m.n_heads),
            "pick n_heads that divides d_model (head size = d_model / n_heads)");
  if (m.n_kv_heads) {
    r.positive("model.n_kv_heads", *m.n_kv_heads);
    r.require(m.n_heads % *m.n_kv_heads == 0, "model.n_kv_heads",
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
  if (m.mlp_hidden_size) r.positive("model.mlp_hidden_size", *m.mlp_hidden_size);
  else r.positive("model.mlp_ratio", m.mlp_ratio);
  const int64_t hidden = m.mlp_hidden_size.value_or(m.mlp_ratio * m.d_model);
  r.one_of("model.activation_type", m.activation_type, {"swiglu", "gelu", "relu"});
  r.require(m.activation_type != "swiglu" || hidden % 2 == 0,
            m.mlp_hidden_size ? "model.mlp_hidden_size" : "model.mlp_ratio",
            fmt::format("SwiGLU splits the MLP hidden size in two halves, but it is odd ({})", hidden),
            "make mlp_hidden_size (or mlp_ratio * d_model) even");
  r.one_of("model.block_type", m.block_type, {"sequential"});
  r.one_of("model.layer_norm_type", m.layer_norm_type, {"default", "low_precision", "rms"});
  r.one_of("activation_checkpointing", m.activation_checkpointing,
           {"", "whole_layer", "one_in_two", "one_in_three", "one_in_four"});
  r.positive("model.layer_norm_eps", m.layer_norm_eps);
  r.positive("model.rope_theta", m.rope_theta);
  if (m.clip_qkv) r.positive("model.clip_qkv", *m.clip_qkv);
  r.probability("model.attention_dropout", m.attention_dropout);
  r.probability("model.residual_dropout", m.residual_dropout);
  r.probability("model.embedding_dropout", m.embedding_dropout);
  r.require(m.embedding_size >= m.vocab_size, "model.embedding_size",
            fmt::format("model.embedding_size {} is smaller than model.vocab_size {}", m.embedding_size,
                        m.vocab_size),
            fmt::format("set embedding_size >= vocab_size, e.g. {} (vocab_size rounded up to a multiple of 128)",
                        (m.vocab_size + 127) / 128 * 128));
  for (const auto& [key, id] : {std::pair{"model.eos_token_id", m.eos_token_id}, {"model.pad_token_id", m.pad_token_id}})
    r.require(id >= 0 && id < m.embedding_size, key,
              fmt::format("{} {} is outside the embedding table [0, {})", key, id, m.embedding_size),
              "use a token id of the tokenizer below embedding_size");
  // OLMo's meta defers allocation until FSDP/DDP places the weights on the device and
  // initialises them there; building on the CPU and moving reaches the same state. A CUDA
  // initialisation would draw from the GPU's generator instead of the seed's CPU stream.
  r.require(m.init_device == "cpu" || m.init_device == "meta", "model.init_device",
            fmt::format("model.init_device \"{}\" is not supported: parameters are initialised on "
                        "the CPU from the seed and then moved to the training device, so a run "
                        "starts from the same weights on any device (OLMo's meta, for FSDP, ends "
                        "in the same state and is accepted)", m.init_device),
            "set model.init_device: cpu or meta");
  r.one_of("model.init_fn", m.init_fn, {"normal", "mitchell", "full_megatron"});
  r.positive("model.init_std", m.init_std);
  if (m.init_cutoff_factor) r.positive("model.init_cutoff_factor", *m.init_cutoff_factor);
  if (m.emb_init_std) r.positive("model.emb_init_std", *m.emb_init_std);
  r.require(!m.residual.empty(), "model.residual", "model.residual is empty",
            "name a topology, e.g. model.residual: pre (or set MODEL_TYPE)");
  r.require(m.mixln_alpha >= 0 && m.mixln_alpha <= 1, "model.mixln_alpha",
            fmt::format("model.mixln_alpha must be in [0, 1], got {}", m.mixln_alpha),
            "set mixln_alpha to the fraction of Post-Norm layers, e.g. 0.25");
  r.positive("model.hc_rate", m.hc_rate);
}

void validate_optimizer(const OptimizerConfig& o, const Rules& r) {
  r.one_of("optimizer.name", o.name, {"adamw"});
  r.positive("optimizer.learning_rate", o.learning_rate);
  r.require(o.weight_decay >= 0, "optimizer.weight_decay",
            fmt::format("optimizer.weight_decay must be >= 0, got {}", o.weight_decay), "set weight_decay >= 0");
  r.positive("optimizer.eps", o.eps);
  r.require(o.betas.size() == 2, "optimizer.betas",
            fmt::format("optimizer.betas needs two values, got {}", o.betas.size()), "write betas: [0.9, 0.95]");
  for (double b : o.betas) r.probability("optimizer.betas", b);
  // AdamW applies lr / (1 - beta1) (its first step) and lr * weight_decay to float32
  // weights; past float32's range LibTorch fails mid-step with an overflow error.
  const double step = std::max(o.learning_rate / (1 - o.betas.front()), o.learning_rate * o.weight_decay);
  r.require(step <= std::numeric_limits<float>::max(), "optimizer.learning_rate",
            fmt::format("optimizer.learning_rate {} is too large for float32 weights: AdamW's first "
                        "step would be {:.3g} (float32 ends at 3.4e38)", o.learning_rate, step),
            "use a learning rate such as 1e-3");
  if (o.metrics_log_interval) r.positive("optimizer.metrics_log_interval", *o.metrics_log_interval);
}

void validate_scheduler(const SchedulerConfig& s, const Rules& r) {
  r.one_of("scheduler.name", s.name,
           {"constant", "constant_with_warmup", "cosine_with_warmup", "linear_with_warmup",
            "inverted_sqrt_with_warmup"});
  r.one_of("scheduler.units", s.units, {"steps", "tokens"});
  r.require(s.t_warmup >= 0, "scheduler.t_warmup",
            fmt::format("scheduler.t_warmup must be >= 0, got {}", s.t_warmup), "set t_warmup >= 0");
  if (s.t_max) r.positive("scheduler.t_max", *s.t_max);
  r.require(s.alpha_f >= 0 && s.alpha_f <= 1, "scheduler.alpha_f",
            fmt::format("scheduler.alpha_f must be in [0, 1], got {}", s.alpha_f),
            "set alpha_f to the final fraction of the peak learning rate, e.g. 0.1");
  if (s.warmup_min_lr)
    r.require(*s.warmup_min_lr >= 0, "scheduler.warmup_min_lr",
              fmt::format("scheduler.warmup_min_lr must be >= 0, got {}", *s.warmup_min_lr),
              "set warmup_min_lr >= 0 or null");
}

const std::vector<std::string> kMemmapDtypes = {"uint8", "uint16", "uint32", "uint64"};

void validate_data(const TrainConfig& c, const Rules& r) {
  r.one_of("data.memmap_dtype", c.data.memmap_dtype, kMemmapDtypes);
  r.one_of("data.pad_direction", c.data.pad_direction, {"right", "left"});
  r.require(c.data.num_workers >= 0, "data.num_workers",
            fmt::format("data.num_workers must be >= 0, got {}", c.data.num_workers), "set num_workers >= 0");
  r.one_of("data.synthetic", c.data.synthetic, {"", "arithmetic"});
  r.require(c.data.arithmetic_digits >= 2 && c.data.arithmetic_digits <= 9, "data.arithmetic_digits",
            fmt::format("data.arithmetic_digits must be in [2, 9], got {}", c.data.arithmetic_digits),
            "use 2 (sums of two-digit numbers) up to 9");
  r.require(!c.tokenizer.identifier.empty(), "tokenizer.identifier", "tokenizer.identifier is empty",
            "name a tokenizer.json file or a known tokenizer");
  r.one_of("tokenizer.truncate_direction", c.tokenizer.truncate_direction, {"right", "left"});

  std::set<std::string> labels;
  for (size_t i = 0; i < c.evaluators.size(); ++i) {
    const auto& e = c.evaluators[i];
    const std::string p = "evaluators[" + std::to_string(i) + "].";
    r.require(!e.label.empty(), p + "label", p + "label is empty", "give every evaluator a label");
    r.require(labels.insert(e.label).second, p + "label",
              "two evaluators are labelled \"" + e.label + "\"", "give every evaluator its own label");
    r.one_of(p + "type", e.type, {"lm", "downstream"});
    if (!e.memmap_dtype.empty()) r.one_of(p + "data.memmap_dtype", e.memmap_dtype, kMemmapDtypes);
    r.require(e.subset_num_batches >= -1 && e.subset_num_batches != 0, p + "subset_num_batches",
              fmt::format("{}subset_num_batches must be -1 or positive, got {}", p, e.subset_num_batches),
              "use -1 for the whole set");
  }
}

}  // namespace

void validate(const TrainConfig& c, const KeyLocator& where) {
  const Rules r(where);
  try {
    parse_duration(c.max_duration);
  } catch (const Error& e) {
    throw Error(e.problem(), r.at("max_duration"), e.fix());
  }
  r.positive("global_train_batch_size", c.global_train_batch_size);
  r.positive("device_train_microbatch_size", c.device_train_microbatch_size);
  r.positive("device_eval_batch_size", c.device_eval_batch_size);
  r.one_of("precision", c.precision, {"fp32", "amp_bf16", "amp_fp16"});
  if (c.max_grad_norm) r.positive("max_grad_norm", *c.max_grad_norm);
  r.positive("save_interval", c.save_interval);
  r.positive("eval_interval", c.eval_interval);
  r.positive("console_log_interval", c.console_log_interval);
  r.require(c.save_num_checkpoints_to_keep >= -1, "save_num_checkpoints_to_keep",
            fmt::format("save_num_checkpoints_to_keep must be -1 (keep all) or >= 0, got {}",
                        c.save_num_checkpoints_to_keep),
            "use -1 to keep every checkpoint");
  r.require(c.eval_subset_num_batches >= -1 && c.eval_subset_num_batches != 0, "eval_subset_num_batches",
            fmt::format("eval_subset_num_batches must be -1 or positive, got {}", c.eval_subset_num_batches),
            "use -1 for whole evaluation sets");
  const bool cuda_index = c.device.rfind("cuda:", 0) == 0 && c.device.size() > 5 &&
                          c.device.find_first_not_of("0123456789", 5) == std::string::npos;
  if (!cuda_index) r.one_of("device", c.device, {"auto", "cpu", "cuda"});
  if (c.peak_tflops) r.positive("peak_tflops", *c.peak_tflops);
  r.require(c.max_bad_steps >= 0, "max_bad_steps", fmt::format("max_bad_steps must be >= 0, got {}", c.max_bad_steps),
            "use 0 to stop at the first non-finite loss");
  r.positive("loss_spike_factor", c.loss_spike_factor);
  int exponent = 0;  // a power of two keeps scaling and unscaling exact
  const bool power_of_two = std::frexp(c.fp16_initial_loss_scale, &exponent) == 0.5;
  r.require(power_of_two && c.fp16_initial_loss_scale >= 1 && c.fp16_initial_loss_scale <= 0x1p100,
            "fp16_initial_loss_scale",
            fmt::format("fp16_initial_loss_scale must be a power of two in [1, 2^100], got {}",
                        c.fp16_initial_loss_scale),
            "use a power of two such as 65536 (2^16, the default)");
  r.positive("fp16_loss_scale_growth_interval", c.fp16_loss_scale_growth_interval);
  validate_model(c.model, r);
  validate_optimizer(c.optimizer, r);
  validate_scheduler(c.scheduler, r);
  validate_data(c, r);
}

void validate_for_world_size(const TrainConfig& c, int world_size, const KeyLocator& where) {
  const Rules r(where);
  if (world_size < 1) throw Error(fmt::format("world size {} is not positive", world_size), "WORLD_SIZE",
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
                        "of {}", per_rank, world_size * micro));
}

}  // namespace siamese
