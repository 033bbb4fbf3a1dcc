#include "siamese/config/schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include <type_traits>

namespace siamese::config::schema {
namespace {

template <class T>
struct IsOptionalEnum : std::false_type {};
template <class E>
struct IsOptionalEnum<std::optional<E>> : std::is_enum<E> {};

template <class T>
constexpr Kind kind_of() {
  if constexpr (std::is_enum_v<T> || IsOptionalEnum<T>::value)
    return Kind::Enum;
  else if constexpr (std::is_same_v<T, int64_t>)
    return Kind::Int;
  else if constexpr (std::is_same_v<T, double>)
    return Kind::Double;
  else if constexpr (std::is_same_v<T, bool>)
    return Kind::Bool;
  else if constexpr (std::is_same_v<T, std::string>)
    return Kind::String;
  else if constexpr (std::is_same_v<T, Duration> || std::is_same_v<T, DeviceSetting>)
    return Kind::Parsed;
  else if constexpr (std::is_same_v<T, std::optional<int64_t>>)
    return Kind::OptInt;
  else if constexpr (std::is_same_v<T, std::optional<double>>)
    return Kind::OptDouble;
  else if constexpr (std::is_same_v<T, std::optional<bool>>)
    return Kind::OptBool;
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return Kind::StringList;
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
    return Kind::IntList;
  else if constexpr (std::is_same_v<T, std::vector<double>>)
    return Kind::DoubleList;
  else if constexpr (std::is_same_v<T, std::vector<EvaluatorConfig>>)
    return Kind::Evaluators;
  else if constexpr (std::is_same_v<T, std::vector<GroupOverrideConfig>>)
    return Kind::GroupOverrides;
  else {
    static_assert(std::is_same_v<T, std::vector<MixtureSourceConfig>>, "type without a schema kind");
    return Kind::Sources;
  }
}

// field<Root>("model.d_model", doc, &TrainConfig::model, &ModelConfig::d_model): the member
// chain picks the struct member, its type picks the kind.
// An enum key accepts its spellings; an optional one "" (unset) first. A parsed key reads and
// writes its member's text.
template <class Root, class T, class... Members>
void add_choices(Field<Root>& f, Members... chain) {
  if constexpr (std::is_enum_v<T>) {
    for (const auto& name : EnumNames<T>::names) f.choices.emplace_back(name);
    f.choice = [=](const Root& root) { return static_cast<size_t>((root.*....*chain)); };
    f.choose = [=](Root& root, size_t i) { (root.*....*chain) = static_cast<T>(i); };
  } else if constexpr (IsOptionalEnum<T>::value) {
    using E = typename T::value_type;
    f.choices.emplace_back("");
    for (const auto& name : EnumNames<E>::names) f.choices.emplace_back(name);
    f.choice = [=](const Root& root) {
      const T& v = (root.*....*chain);
      return v ? static_cast<size_t>(*v) + 1 : size_t{0};
    };
    f.choose = [=](Root& root, size_t i) { (root.*....*chain) = i == 0 ? T{} : T{static_cast<E>(i - 1)}; };
  } else if constexpr (std::is_same_v<T, Duration> || std::is_same_v<T, DeviceSetting>) {
    f.text = [=](const Root& root) { return (root.*....*chain).text(); };
    f.parse = [=](Root& root, const std::string& text) { (root.*....*chain) = T(text); };
  }
}

template <class Root, class... Members>
Field<Root> field(const char* key, const char* doc, Members... chain) {
  using T = std::remove_cv_t<std::remove_reference_t<decltype((std::declval<Root&>().*....*chain))>>;
  Field<Root> f{key, kind_of<T>(), [=](Root& root) -> void* { return &(root.*....*chain); }, doc, false};
  add_choices<Root, T>(f, chain...);
  return f;
}

template <class Root, class... Members>
Field<Root> ours(const char* key, const char* doc, Members... chain) {
  Field<Root> f = field<Root>(key, doc, chain...);
  f.ours = true;
  return f;
}

using T = TrainConfig;
using M = ModelConfig;
using S = SiameseConfig;
using K = KernelsConfig;
using P = MupConfig;
using O = OptimizerConfig;
using Mu = MuonConfig;
using Sc = SchedulerConfig;
using D = DataConfig;
using If = InstanceFilterConfig;
using Tk = TokenizerConfig;
using E = EvaluatorConfig;
using G = GroupOverrideConfig;
using Mx = MixtureSourceConfig;

// Run, batch, precision, evaluation and logging keys.
std::vector<Field<T>> run_fields() {
  return {
      field<T>("run_name", "Name of the run; used in ${run_name} interpolations and logs.", &T::run_name),
      field<T>("seed", "Random seed for initialization and data order.", &T::seed),
      field<T>("save_folder", "Folder for checkpoints and metrics.", &T::save_folder),
      field<T>("save_interval", "Save a checkpoint every this many steps.", &T::save_interval).positive(),
      field<T>("save_num_checkpoints_to_keep", "Keep only the newest N checkpoints (-1 keeps all).",
               &T::save_num_checkpoints_to_keep)
          .at_least(-1)
          .fixed_by("use -1 to keep every checkpoint"),
      field<T>("save_overwrite", "Allow writing into a save_folder that already has checkpoints.",
               &T::save_overwrite),
      ours<T>("save_async",
              "Write checkpoints on a background thread of every rank while training goes on (OLMo-core's "
              "save_async); the step loop stops only to copy its part to host memory. A save due while the "
              "previous one still writes waits for it.",
              &T::save_async),
      field<T>("load_path", "Checkpoint to resume from (empty or null: start fresh).", &T::load_path),
      ours<T>(
          "decay_from",
          "A stable wsd run's checkpoint (RUN/stepN) to branch a decay of scheduler.t_decay from: the run "
          "trains N + t_decay steps from it, in RUN_decayN+K beside RUN unless save_folder names another "
          "folder (empty: no branch).",
          &T::decay_from),
      field<T>("max_duration", "Training length: steps (1000, 739_328, 1e4), tokens (2e9T) or epochs (1ep).",
               &T::max_duration),
      field<T>("time_limit",
               "Wall-clock seconds from start-up: training saves a checkpoint and stops, exit code 0, "
               "when the next check would come after them (null: no limit).",
               &T::time_limit)
          .positive(),
      field<T>("global_train_batch_size", "Sequences per optimizer step, summed over all ranks.",
               &T::global_train_batch_size)
          .positive(),
      field<T>("device_train_microbatch_size",
               "Sequences per forward/backward on one rank (gradient accumulation splits the rest).",
               &T::device_train_microbatch_size)
          .positive(),
      field<T>("device_eval_batch_size", "Sequences per evaluation forward on one rank.",
               &T::device_eval_batch_size)
          .positive(),
      field<T>("precision", "Autocast of matmuls to bf16 or fp16 (fp16 adds dynamic loss scaling), or fp32.",
               &T::precision),
      field<T>("activation_checkpointing",
               "Recompute blocks' activations in backward: every block, or every n-th (one_in_n); "
               "\"\" (null) for none.",
               &T::model, &M::activation_checkpointing)
          .changeable_on_resume(),
      field<T>(
          "fused_loss",
          "Compute the LM head and the loss over chunks of fused_loss_chunk_tokens tokens, never "
          "holding every logit; backward recomputes each chunk's logits. Same loss and gradients. null: off.",
          &T::model, &M::fused_loss)
          .changeable_on_resume(),
      ours<T>("fused_loss_chunk_tokens",
              "Tokens per chunk of the LM head and loss with fused_loss (logits held at once: this many "
              "x embedding_size).",
              &T::model, &M::fused_loss_chunk_tokens)
          .positive()
          .changeable_on_resume(),
      ours<T>("allow_tf32", "CUDA: fp32 matmuls use TF32 tensor cores (10-bit mantissa inputs).",
              &T::allow_tf32),
      ours<T>("cuda_graphs",
              "CUDA: capture a full micro-batch's forward and backward once and replay it as a CUDA graph. "
              "One rank, dense, no dropout, activation checkpointing or intra-document attention; "
              "otherwise off with a warning.",
              &T::cuda_graphs)
          .changeable_on_resume(),
      field<T>("max_grad_norm", "Clip the global gradient norm to this (null: no clipping).",
               &T::max_grad_norm)
          .positive(),
      field<T>("softmax_auxiliary_loss",
               "Add OLMo's z-loss, auxiliary_loss_multiplier * mean(logsumexp(logits)^2), to the training "
               "loss; logged as z_loss.",
               &T::softmax_auxiliary_loss),
      field<T>("auxiliary_loss_multiplier", "The z-loss's weight (with softmax_auxiliary_loss).",
               &T::auxiliary_loss_multiplier)
          .at_least(0),
      field<T>("eval_interval", "Run the evaluators every this many steps.", &T::eval_interval).positive(),
      field<T>("eval_subset_num_batches",
               "Batches per LM evaluator (-1: the whole set); it also bounds the synthetic arithmetic answer "
               "check to as many batches of problems.",
               &T::eval_subset_num_batches),
      field<T>("console_log_interval", "Log training metrics to the console every this many steps.",
               &T::console_log_interval)
          .positive(),
      field<T>("wandb.project",
               "Weights & Biases project that rank 0 streams every metrics row to as the run trains, from a "
               "python of the venv (docs/analysis.md); \"\" (null): off. WANDB_MODE=offline and W&B's other "
               "variables apply.",
               &T::wandb, &WandbConfig::project),
      field<T>("wandb.entity", "W&B entity (user or team); \"\": W&B's default.", &T::wandb,
               &WandbConfig::entity),
      field<T>("wandb.group", "W&B run group; \"\": none.", &T::wandb, &WandbConfig::group),
      field<T>("wandb.name", "W&B run name; \"\": the run folder's name.", &T::wandb, &WandbConfig::name),
      field<T>("wandb.tags", "W&B run tags.", &T::wandb, &WandbConfig::tags),
      field<T>("wandb.log_interval", "Stream every this many steps' rows (evaluations and events always).",
               &T::wandb, &WandbConfig::log_interval)
          .positive(),
      ours<T>("device", "auto (CUDA when available), cpu, cuda or cuda:N.", &T::device),
      field<T>("torch_profiling",
               "Trace steps 7-9 of the process (OLMo-core's profiler schedule: 1 wait, 5 warm-up, 3 "
               "traced) to save_folder/profiler/step<A>-<B>.rank<R>.chrome_trace.json.",
               &T::torch_profiling),
      ours<T>(
          "stream_stats_interval",
          "Every N steps, per layer and stream: the stream's RMS, each sublayer's output RMS, the largest "
          "attention logit and multi-stream mixing weights, on a fixed micro-batch of the training data "
          "(metrics.jsonl event stream_stats, TensorBoard; null: off).",
          &T::stream_stats_interval)
          .positive(),
      ours<T>("peak_tflops",
              "Hardware peak TFLOP/s per rank for MFU (null: the GPU's dense peak from the table in "
              "docs/configuration.md; none on CPUs or unknown GPUs).",
              &T::peak_tflops)
          .positive(),
      ours<T>("max_bad_steps",
              "Skip up to this many steps with a non-finite loss or gradient before stopping.",
              &T::max_bad_steps)
          .at_least(0)
          .fixed_by("use 0 to stop at the first non-finite loss"),
      ours<T>("fp16_initial_loss_scale",
              "amp_fp16: the dynamic loss scale's start (halved at each overflow).",
              &T::fp16_initial_loss_scale),
      ours<T>("fp16_loss_scale_growth_interval",
              "amp_fp16: steps in a row without an overflow that double the loss scale.",
              &T::fp16_loss_scale_growth_interval)
          .positive(),
      ours<T>("loss_spike_factor", "Flag a step whose loss exceeds this multiple of the running median.",
              &T::loss_spike_factor)
          .positive(),
  };
}

// distributed.* and fsdp.*.
std::vector<Field<T>> distributed_fields() {
  return {
      ours<T>("distributed.bucket_mb", "Gradient all-reduce bucket size in MiB.", &T::distributed,
              &DistributedConfig::bucket_mb)
          .positive(),
      ours<T>("distributed.overlap", "Start bucket all-reduces during backward (false: after it).",
              &T::distributed, &DistributedConfig::overlap),
      ours<T>("distributed.timeout_seconds",
              "A collective waiting longer than this fails the run (a rank died or hangs).", &T::distributed,
              &DistributedConfig::timeout_seconds)
          .positive(),
      ours<T>("distributed.backend",
              "The collectives' c10d backend. auto: NCCL on CUDA, Gloo on the CPU; gloo: Gloo for CUDA "
              "tensors too, through host copies (several ranks on one GPU, which NCCL refuses); nccl: "
              "NCCL, which needs a CUDA device per rank.",
              &T::distributed, &DistributedConfig::backend),
      field<T>("distributed_strategy",
               "ddp: every rank holds a full replica; fsdp: ranks shard state as fsdp.sharding_strategy "
               "says (docs/distributed.md). OLMo's default is fsdp.",
               &T::distributed_strategy),
      field<T>("fsdp.sharding_strategy",
               "With distributed_strategy fsdp: NO_SHARD (the ddp path), SHARD_GRAD_OP (gradients, float32 "
               "master weights and optimizer state sharded), FULL_SHARD (parameters too, gathered a block "
               "at a time), HYBRID_SHARD (FULL_SHARD inside each node, a replica per node).",
               &T::fsdp, &FsdpConfig::sharding_strategy),
      field<T>("fsdp.precision",
               "mixed: gradient reductions in float32; pure: reduce-scatters in the autocast dtype "
               "(bf16 / fp16 under amp_*, half the bytes; float32 under fp32), shards and optimizer in "
               "float32.",
               &T::fsdp, &FsdpConfig::precision),
      field<T>("fsdp.wrapping_strategy",
               "The units gradients are reduce-scattered in: \"\" (null) buckets of distributed.bucket_mb, "
               "by_block one per transformer block (FULL_SHARD always uses blocks).",
               &T::fsdp, &FsdpConfig::wrapping_strategy),
      field<T>("fsdp.hybrid_sharding_num_model_replicas",
               "HYBRID_SHARD: model replicas; each is sharded over world / replicas consecutive ranks "
               "(null: one per node, from LOCAL_WORLD_SIZE or Slurm's tasks per node).",
               &T::fsdp, &FsdpConfig::hybrid_sharding_num_model_replicas)
          .positive(),
  };
}

// model.*: sizes, attention, norms, initialization.
std::vector<Field<T>> model_fields() {
  return {
      field<T>("model.d_model", "Hidden size.", &T::model, &M::d_model).positive(),
      field<T>("model.n_heads", "Attention heads; must divide d_model.", &T::model, &M::n_heads).positive(),
      field<T>("model.n_kv_heads", "Key/value heads (GQA); must divide n_heads (null: n_heads).", &T::model,
               &M::n_kv_heads)
          .positive(),
      field<T>("model.clip_qkv", "Clamp Q, K, V to [-clip_qkv, clip_qkv] (null: off).", &T::model,
               &M::clip_qkv)
          .positive(),
      field<T>("model.n_layers", "Transformer blocks.", &T::model, &M::n_layers).positive(),
      field<T>("model.mlp_ratio", "MLP hidden size = mlp_ratio * d_model (SwiGLU halves it for the gate).",
               &T::model, &M::mlp_ratio),
      field<T>("model.mlp_hidden_size", "Explicit MLP hidden size; overrides mlp_ratio (null: unset).",
               &T::model, &M::mlp_hidden_size)
          .positive(),
      field<T>("model.activation_type", "MLP activation.", &T::model, &M::activation_type),
      field<T>("model.block_type",
               "Block layout: sequential (dense MLP) or moe (the MLP is OLMoE's sparse mixture of experts, "
               "the moe_* keys); norm placement is model.residual.",
               &T::model, &M::block_type),
      field<T>("model.rope", "Rotary position embeddings (else learned absolute positions).", &T::model,
               &M::rope),
      field<T>("model.rope_full_precision", "Apply RoPE in fp32 under autocast.", &T::model,
               &M::rope_full_precision),
      field<T>("model.rope_theta", "RoPE base period.", &T::model, &M::rope_theta).positive(),
      field<T>("model.sliding_window_pattern",
               "Sliding-window attention as OLMo-core's sliding_window.pattern: layer l reads the last "
               "pattern[l % size] positions (itself included), -1 for full causal attention; OLMo-3 is "
               "[4096, 4096, 4096, -1]. [] (null): every layer full.",
               &T::model, &M::sliding_window_pattern),
      field<T>("model.flash_attention", "Use a fused attention kernel when LibTorch has one.", &T::model,
               &M::flash_attention)
          .changeable_on_resume(),
      field<T>("model.attention_dropout", "Dropout on attention probabilities.", &T::model,
               &M::attention_dropout)
          .within(0, 1, false, true)
          .changeable_on_resume(),
      field<T>("model.multi_query_attention", "One key/value head (same as n_kv_heads: 1).", &T::model,
               &M::multi_query_attention),
      field<T>("model.attention_layer_norm", "OLMo's full-width layer norms on Q and K.", &T::model,
               &M::attention_layer_norm),
      field<T>("model.residual_dropout", "Dropout on each sublayer output before the residual add.",
               &T::model, &M::residual_dropout)
          .within(0, 1, false, true)
          .changeable_on_resume(),
      field<T>("model.embedding_dropout", "Dropout on the token embeddings.", &T::model,
               &M::embedding_dropout)
          .within(0, 1, false, true)
          .changeable_on_resume(),
      field<T>("model.embedding_layer_norm", "Layer norm on the embeddings (OLMo's switch).", &T::model,
               &M::embedding_layer_norm),
      field<T>("model.layer_norm_type",
               "Every norm of the model: LayerNorm (default, low_precision), RMSNorm (rms), or a point-wise "
               "stand-in: DyT (dyt, weight * tanh(alpha x) + bias) or Derf (derf, weight * erf(alpha x + "
               "shift) + bias).",
               &T::model, &M::layer_norm_type),
      field<T>("model.layer_norm_with_affine", "Norms have a learnable weight.", &T::model,
               &M::layer_norm_with_affine),
      field<T>("model.layer_norm_eps", "Epsilon of every norm.", &T::model, &M::layer_norm_eps).positive(),
      field<T>("model.attention_layer_norm_with_affine", "Q/K norms have a learnable weight.", &T::model,
               &M::attention_layer_norm_with_affine),
      field<T>("model.max_sequence_length", "Tokens per training sequence (and RoPE cache size).", &T::model,
               &M::max_sequence_length)
          .positive(),
      field<T>("model.include_bias", "Linear layers have biases.", &T::model, &M::include_bias),
      field<T>("model.bias_for_layer_norm", "Norms have a bias (null: include_bias).", &T::model,
               &M::bias_for_layer_norm),
      field<T>("model.scale_logits", "Multiply logits by 1/sqrt(d_model).", &T::model, &M::scale_logits),
      field<T>("model.vocab_size", "Tokenizer vocabulary size.", &T::model, &M::vocab_size).positive(),
      field<T>("model.embedding_size", "Embedding rows, padded up from vocab_size (>= vocab_size).",
               &T::model, &M::embedding_size),
      field<T>("model.weight_tying", "Share the input embedding with the output projection.", &T::model,
               &M::weight_tying),
      field<T>("model.eos_token_id", "End-of-document token id.", &T::model, &M::eos_token_id),
      field<T>("model.pad_token_id", "Padding token id.", &T::model, &M::pad_token_id),
      field<T>("model.init_device",
               "cpu or meta: parameters are initialised on the CPU from the seed, then moved to the device.",
               &T::model, &M::init_device)
          .fixed_by("set model.init_device: cpu or meta (parameters are initialised on the CPU from the seed "
                    "and moved to the device, so a run starts from the same weights on any device; OLMo's "
                    "meta ends in the same state)")
          .changeable_on_resume(),
      field<T>("model.init_fn", "Initialization scheme (OLMo's init_fn).", &T::model, &M::init_fn)
          .changeable_on_resume(),
      field<T>("model.init_std", "Standard deviation for init_fn normal / full_megatron.", &T::model,
               &M::init_std)
          .positive()
          .changeable_on_resume(),
      field<T>("model.init_cutoff_factor",
               "Truncate the normal init at this many std (null: init_fn's own rule).", &T::model,
               &M::init_cutoff_factor)
          .positive()
          .changeable_on_resume(),
      field<T>("model.emb_init_std", "Embedding init std (null: init_std).", &T::model, &M::emb_init_std)
          .positive()
          .changeable_on_resume(),
      field<T>("model.scale_emb_init", "Scale the embedding init by sqrt(d_model).", &T::model,
               &M::scale_emb_init)
          .changeable_on_resume(),
  };
}

// model.*: per-head norms, MoE and the topologies' own keys.
std::vector<Field<T>> model_topology_fields() {
  return {
      field<T>("model.use_query_norm", "Per-head norm on queries (HybridNorm's QKV norm).", &T::model,
               &M::use_query_norm),
      field<T>("model.use_key_norm", "Per-head norm on keys (HybridNorm's QKV norm).", &T::model,
               &M::use_key_norm),
      field<T>("model.use_value_norm", "Per-head norm on values (HybridNorm's QKV norm).", &T::model,
               &M::use_value_norm),
      field<T>("model.moe_num_experts", "block_type moe: routed experts per block.", &T::model,
               &M::moe_num_experts)
          .positive(),
      field<T>("model.moe_top_k", "block_type moe: experts each token is routed to (<= moe_num_experts).",
               &T::model, &M::moe_top_k)
          .positive(),
      field<T>("model.moe_mlp_impl",
               "block_type moe: sparse and grouped (OLMo's names) run LibTorch's grouped GEMM where it "
               "takes the operands (CPU; CUDA under bf16) and one matmul per expert elsewhere; loop always "
               "runs one matmul per expert.",
               &T::model, &M::moe_mlp_impl)
          .changeable_on_resume(),
      field<T>("model.moe_log_expert_assignment",
               "block_type moe: log every block's per-expert token counts each step (metrics.jsonl).",
               &T::model, &M::moe_log_expert_assignment)
          .changeable_on_resume(),
      field<T>("model.moe_shared_expert",
               "block_type moe: add an always-used SwiGLU expert of the same width (DeepSeekMoE).", &T::model,
               &M::moe_shared_expert),
      field<T>("model.moe_lbl_in_fp32", "block_type moe: compute the load-balancing loss in float32.",
               &T::model, &M::moe_lbl_in_fp32)
          .changeable_on_resume(),
      field<T>(
          "model.moe_loss_weight",
          "block_type moe: weight of the load-balancing loss (Switch/OLMoE: num_experts * sum_e f_e P_e, "
          "averaged over blocks) added to the training loss.",
          &T::model, &M::moe_loss_weight)
          .at_least(0)
          .changeable_on_resume(),
      field<T>("model.moe_zloss_weight",
               "block_type moe: weight of the router z-loss (mean logsumexp(router logits)^2) (null: off).",
               &T::model, &M::moe_zloss_weight)
          .at_least(0)
          .changeable_on_resume(),
      field<T>(
          "model.moe_dropless",
          "block_type moe: compute every routed token (dMoE); false drops tokens over an expert's capacity.",
          &T::model, &M::moe_dropless),
      field<T>("model.moe_capacity_factor",
               "block_type moe, moe_dropless false: expert capacity = factor * tokens * top_k / num_experts.",
               &T::model, &M::moe_capacity_factor)
          .positive(),
      ours<T>("model.moe_norm_topk_prob",
              "block_type moe: rescale the top-k routing weights to sum to 1 (transformers' norm_topk_prob; "
              "OLMoE keeps the raw softmax weights).",
              &T::model, &M::moe_norm_topk_prob),
      ours<T>("model.moe_router_bias_rate",
              "block_type moe: DeepSeek-V3's auxiliary-loss-free balancing (OLMo-core's bias_gamma): a "
              "per-expert bias added to the scores for the top-k choice only, moved by this much after each "
              "step toward the mean load, rate * sign(mean - load); e.g. 1e-3 (null: none).",
              &T::model, &M::moe_router_bias_rate)
          .positive(),
      ours<T>("model.moe_lb_loss_granularity",
              "block_type moe: the load-balancing loss over the micro-batch's tokens (local_batch) or per "
              "sequence, averaged (instance: DeepSeek-V3's sequence-wise balance loss), as OLMo-core's.",
              &T::model, &M::moe_lb_loss_granularity)
          .changeable_on_resume(),
      ours<T>("model.residual", "Residual topology, the MODEL_TYPE values (see Topologies below).", &T::model,
              &M::residual),
      ours<T>("model.siamese.depth_scaling", "SiameseNorm: divide X-stream updates by c_l = sqrt(2(l+1)).",
              &T::model, &M::siamese, &S::depth_scaling),
      ours<T>("model.siamese.fused_input_norm", "SiameseNorm: norm on the fused sublayer input.", &T::model,
              &M::siamese, &S::fused_input_norm),
      ours<T>("model.siamese.gamma", "SiameseNorm hybrid_pre: learnable vector on X before attention.",
              &T::model, &M::siamese, &S::gamma),
      ours<T>("model.siamese.x_stream",
              "SiameseNorm (model.residual siamese): the single-stream topology whose norm placement "
              "the X stream takes, coupled with the Pre-Norm stream Y (empty: post; post_pre and "
              "hybrid_pre fix it to post and hybrid).",
              &T::model, &M::siamese, &S::x_stream)
          .fixed_by("use one of post, hybrid, hybrid_star, deepnorm, mixln, peri, lns, pre, reordered: X "
                    "takes one stream with norms before or after the residual add; multi-stream "
                    "topologies (residual, hc, mhc, mhc_lite, the SiameseNorm ones), nGPT (its stream "
                    "lives on the unit sphere) and pre_embednorm (it changes the embeddings both "
                    "streams start from) cannot be X"),
      ours<T>("model.parametrization",
              "How init, learning rates and multipliers scale from the base shape (model.mup.*): standard "
              "(as set), mup (width: Yang et al. 2022) or completep (width and depth: Dey et al. 2025); "
              "docs/analysis.md, Parametrizations.",
              &T::model, &M::parametrization),
      ours<T>("model.mup.base_d_model",
              "mup / completep: the d_model the config's learning rates and init are tuned at (null: "
              "d_model).",
              &T::model, &M::mup, &P::base_d_model)
          .positive(),
      ours<T>("model.mup.base_n_heads",
              "mup / completep: the base shape's heads; its head width base_d_model / base_n_heads sets the "
              "attention scale's rule (null: n_heads).",
              &T::model, &M::mup, &P::base_n_heads)
          .positive(),
      ours<T>("model.mup.base_n_layers", "completep: the base shape's layers (null: n_layers).", &T::model,
              &M::mup, &P::base_n_layers)
          .positive(),
      ours<T>("model.mup.depth_alpha",
              "completep: residual branches times (n_layers / base_n_layers)^-alpha; 1 is CompleteP, 0.5 "
              "depth-muP.",
              &T::model, &M::mup, &P::depth_alpha),
      ours<T>("model.kernels.all",
              "The custom kernel families without a choice of their own: fused (our kernels) or aten "
              "(the ATen composition; docs/architecture.md, Kernels).",
              &T::model, &M::kernels, &K::all),
      ours<T>("model.kernels.norm",
              "RMSNorm, LayerNorm and the two-stream update: fused or aten (empty: "
              "model.kernels.all).",
              &T::model, &M::kernels, &K::norm),
      ours<T>("model.kernels.swiglu", "SwiGLU: fused or aten (empty: model.kernels.all).", &T::model,
              &M::kernels, &K::swiglu),
      ours<T>("model.kernels.cross_entropy",
              "The softmax statistics and cross-entropy gradient: fused or aten (empty: model.kernels.all).",
              &T::model, &M::kernels, &K::cross_entropy),
      ours<T>("model.kernels.rope", "RoPE's rotation: fused or aten (empty: model.kernels.all).", &T::model,
              &M::kernels, &K::rope),
      ours<T>("model.kernels.qkv_heads",
              "Attention's head preparation (q/k norms and RoPE in one pass): fused or aten (empty: "
              "model.kernels.all).",
              &T::model, &M::kernels, &K::qkv_heads),
      ours<T>("model.mixln_alpha", "Mix-LN: the first floor(alpha * n_layers) blocks are Post-Norm.",
              &T::model, &M::mixln_alpha)
          .within(0, 1)
          .fixed_by("set mixln_alpha to the fraction of Post-Norm layers, e.g. 0.25"),
      ours<T>("model.hc_rate", "Hyper-Connections expansion rate n (number of streams).", &T::model,
              &M::hc_rate)
          .within(1, 32)
          .fixed_by("use 2 to 8 streams, as the papers do (each stream is a copy of the residual)"),
      ours<T>("model.hc_dynamic", "Hyper-Connections: dynamic (DHC) rather than static (SHC).", &T::model,
              &M::hc_dynamic),
      ours<T>("model.mhc_sinkhorn_iters",
              "mHC: Sinkhorn-Knopp iterations (row and column normalisations) that make the mixing "
              "matrix doubly stochastic.",
              &T::model, &M::mhc_sinkhorn_iters)
          .positive(),
      ours<T>("model.mhc_eps",
              "mHC / mHC-lite: epsilon added to the pre weights and to every Sinkhorn normalisation "
              "(transformers' hc_eps); 0 gives the paper's plain exp-then-normalise Sinkhorn.",
              &T::model, &M::mhc_eps)
          .at_least(0),
      ours<T>("model.mhc_post_scale",
              "mHC / mHC-lite: post weights are mhc_post_scale * sigmoid(.) (2 in DeepSeek-V4's code; "
              "1 gives a plain sigmoid).",
              &T::model, &M::mhc_post_scale)
          .positive(),
      ours<T>("model.attnres_block_size",
              "attnres: sublayers (attention and MLP count one each) per Block AttnRes block; each sublayer "
              "attends over the embeddings, every completed block's summed outputs and the current block's "
              "partial sum. 0 = Full AttnRes (every earlier output is a source; the same as 1).",
              &T::model, &M::attnres_block_size)
          .at_least(0)
          .fixed_by("set model.attnres_block_size to 0 (Full AttnRes) or a positive number of sublayers"),
      ours<T>("model.dca_past_layers",
              "dca: k of DeepCrossAttention; each block combines the first k and the last k of the earlier "
              "block outputs (the embeddings being the first), every one of them while there are at most 2k.",
              &T::model, &M::dca_past_layers)
          .positive(),
      ours<T>("model.dyt_alpha_init",
              "DyT (arXiv 2503.10622): initial alpha of every norm; the paper's default is 0.5 and it "
              "tunes lower values for wider LLMs.",
              &T::model, &M::dyt_alpha_init)
          .positive(),
      ours<T>("model.derf_alpha_init", "Derf (arXiv 2512.10938): initial alpha of every norm.", &T::model,
              &M::derf_alpha_init)
          .positive(),
      ours<T>("model.derf_shift_init", "Derf: initial shift s inside erf(alpha x + s).", &T::model,
              &M::derf_shift_init),
  };
}

// optimizer.*.
std::vector<Field<T>> optimizer_fields() {
  return {
      field<T>("optimizer.name",
               "adamw: AdamW for every parameter. muon: Muon for the hidden layers' matrices, AdamW (the "
               "keys below) for embeddings, the LM head, norms and biases.",
               &T::optimizer, &O::name),
      field<T>("optimizer.learning_rate", "Peak learning rate (of AdamW's parameters with muon).",
               &T::optimizer, &O::learning_rate)
          .positive(),
      field<T>("optimizer.weight_decay", "Decoupled weight decay (AdamW's parameters with muon).",
               &T::optimizer, &O::weight_decay)
          .at_least(0),
      field<T>("optimizer.betas", "Adam betas [beta1, beta2].", &T::optimizer, &O::betas)
          .within(0, 1, false, true),
      field<T>("optimizer.eps", "Adam epsilon.", &T::optimizer, &O::eps).positive(),
      field<T>("optimizer.decay_norm_and_bias", "Apply weight decay to norm weights and biases.",
               &T::optimizer, &O::decay_norm_and_bias),
      field<T>("optimizer.decay_embeddings", "Apply weight decay to the embeddings.", &T::optimizer,
               &O::decay_embeddings),
      field<T>("optimizer.metrics_log_interval",
               "Log per-parameter optimizer metrics every N steps (null: never).", &T::optimizer,
               &O::metrics_log_interval)
          .positive(),
      ours<T>("optimizer.muon.learning_rate",
              "muon: peak learning rate of the matrices, scaled by the schedule as learning_rate is "
              "(null: learning_rate).",
              &T::optimizer, &O::muon, &Mu::learning_rate)
          .positive(),
      ours<T>(
          "optimizer.muon.weight_decay",
          "muon: decoupled weight decay of the matrices, lr * weight_decay per step (null: weight_decay).",
          &T::optimizer, &O::muon, &Mu::weight_decay)
          .at_least(0),
      ours<T>("optimizer.muon.momentum", "muon: momentum buffer B = momentum * B + (1 - momentum) * grad.",
              &T::optimizer, &O::muon, &Mu::momentum)
          .within(0, 1, false, true),
      ours<T>("optimizer.muon.nesterov",
              "muon: orthogonalise (1 - momentum) * grad + momentum * B rather than B.", &T::optimizer,
              &O::muon, &Mu::nesterov),
      ours<T>("optimizer.muon.ns_steps", "muon: Newton-Schulz iterations (bfloat16) per update.",
              &T::optimizer, &O::muon, &Mu::ns_steps)
          .within(1, 99)
          .fixed_by("use 5, Muon's default"),
      ours<T>(
          "optimizer.muon.adjust_lr",
          "muon: a [A, B] matrix's step size: original lr * sqrt(max(1, A/B)), match_rms_adamw lr * 0.2 * "
          "sqrt(max(A, B)) (the update's RMS of AdamW's, so AdamW's learning rate carries over).",
          &T::optimizer, &O::muon, &Mu::adjust_lr),
      ours<T>("optimizer.topology_lr_multiplier",
              "The topology's own tensors (mixing weights, gains, lambdas; its norms are norms) take "
              "learning_rate * this.",
              &T::optimizer, &O::topology_lr_multiplier)
          .positive(),
      ours<T>("optimizer.topology_weight_decay",
              "Weight decay of the topology's own tensors (0: decay would pull the mixing toward none).",
              &T::optimizer, &O::topology_weight_decay)
          .at_least(0),
      field<T>("optimizer.group_overrides",
               "Parameter groups of their own (OLMo-core's form): a list of maps `params` (name globs) and "
               "`opts` (below); AdamW's parameters only.",
               &T::optimizer, &O::group_overrides),
  };
}

// scheduler.*.
std::vector<Field<T>> scheduler_fields() {
  return {
      field<T>("scheduler.name",
               "Learning-rate schedule: OLMo's schedulers, or wsd (OLMo-core's warmup-stable-decay).",
               &T::scheduler, &Sc::name),
      field<T>("scheduler.units", "Units of t_warmup and t_max.", &T::scheduler, &Sc::units),
      field<T>("scheduler.t_warmup", "Linear warmup length.", &T::scheduler, &Sc::t_warmup).at_least(0),
      field<T>("scheduler.t_max", "Decay horizon (null: the run's max_duration).", &T::scheduler, &Sc::t_max)
          .positive(),
      field<T>("scheduler.alpha_f", "Final learning rate = alpha_f * learning_rate.", &T::scheduler,
               &Sc::alpha_f)
          .within(0, 1)
          .fixed_by("set alpha_f to the final fraction of the peak learning rate, e.g. 0.1"),
      field<T>("scheduler.warmup_min_lr",
               "Learning rate at step 0 of warmup (null: 10% of the peak, as OLMo's scheduler).",
               &T::scheduler, &Sc::warmup_min_lr)
          .at_least(0),
      ours<T>("scheduler.t_decay",
              "wsd: length of the decay at the end of t_max, in scheduler units (OLMo-core's decay; null: "
              "decay_fraction of t_max).",
              &T::scheduler, &Sc::t_decay)
          .at_least(0),
      ours<T>("scheduler.decay_fraction",
              "wsd: the decay's share of t_max, rounded half to even as OLMo-core (null with t_decay null: "
              "0.1, OLMo-core's default).",
              &T::scheduler, &Sc::decay_fraction)
          .within(0, 1),
      ours<T>("scheduler.decay_shape",
              "wsd: the decay from the peak to alpha_f of it: linear (OLMo-core), cosine (half a period) or "
              "1-sqrt (Hägele et al. 2024).",
              &T::scheduler, &Sc::decay_shape),
  };
}

// data.*, tokenizer.* and evaluators.
std::vector<Field<T>> data_fields() {
  return {
      field<T>("data.paths", "Token files (numpy memmaps of memmap_dtype) to train on.", &T::data, &D::paths),
      ours<T>("data.source_mixture",
              "Instead of paths: weighted sources, each a map of the keys below (OLMo-core's "
              "SourceMixtureConfig); the run's tokens are drawn from them in their target ratios "
              "(docs/data.md).",
              &T::data, &D::source_mixture),
      field<T>("data.memmap_dtype", "Token file element type.", &T::data, &D::memmap_dtype),
      field<T>("data.pad_direction", "Side sequences are padded on.", &T::data, &D::pad_direction),
      field<T>("data.drop_last", "Drop the final incomplete batch.", &T::data, &D::drop_last),
      field<T>("data.num_workers", "Background loader threads (0: load on the training thread).", &T::data,
               &D::num_workers)
          .at_least(0),
      field<T>("data.pin_memory", "Pin host batches for faster GPU copies.", &T::data, &D::pin_memory),
      field<T>("data.seed", "Data-order seed (null: the top-level seed).", &T::data, &D::seed),
      ours<T>("data.synthetic", "Built-in synthetic corpus used when paths is empty (\"\": none).", &T::data,
              &D::synthetic),
      ours<T>("data.arithmetic_digits", "Operands of the arithmetic corpus have up to N digits (2-9).",
              &T::data, &D::arithmetic_digits)
          .within(2, 9)
          .fixed_by("use 2 (sums of two-digit numbers) up to 9"),
      field<T>("data.generate_doc_lengths",
               "Intra-document attention: a token attends only to earlier tokens of its own document "
               "(documents end at model.eos_token_id, which belongs to the document it ends).",
               &T::data, &D::generate_doc_lengths),
      ours<T>("data.rope_restart_per_document",
              "With generate_doc_lengths: RoPE positions restart at 0 at each document's first token.",
              &T::data, &D::rope_restart_per_document),
      field<T>("data.instance_filter.repetition_max_period",
               "OLMo-2's instance filter (on when any instance_filter key is set): the longest n-gram "
               "period checked (null: 13).",
               &T::data, &D::instance_filter, &If::repetition_max_period)
          .positive(),
      field<T>("data.instance_filter.repetition_min_period", "The shortest n-gram period checked (null: 1).",
               &T::data, &D::instance_filter, &If::repetition_min_period)
          .positive(),
      field<T>("data.instance_filter.repetition_max_count",
               "An instance with an n-gram repeated this many times in a row is left out of training "
               "(null: 32).",
               &T::data, &D::instance_filter, &If::repetition_max_count)
          .positive(),

      field<T>("tokenizer.identifier", "Tokenizer name or tokenizer.json path.", &T::tokenizer,
               &Tk::identifier),
      field<T>("tokenizer.truncate_direction", "Side long inputs are truncated on.", &T::tokenizer,
               &Tk::truncate_direction),

      field<T>("evaluators", "Evaluators run every eval_interval steps; a list of maps (below).",
               &T::evaluators),
  };
}

}  // namespace

const std::vector<Field<TrainConfig>>& train_fields() {
  // The sections in the order the docs list them; a key's place in its section is its row.
  static const std::vector<Field<T>> fields = [] {
    std::vector<Field<T>> all;
    for (auto section : {run_fields, distributed_fields, model_fields, model_topology_fields,
                         optimizer_fields, scheduler_fields, data_fields}) {
      auto part = section();
      all.insert(all.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
    return all;
  }();
  return fields;
}

const std::vector<Field<EvaluatorConfig>>& evaluator_fields() {
  static const std::vector<Field<E>> fields = {
      field<E>("label", "Name in logs and metrics.", &E::label),
      field<E>("type", "lm: perplexity on token files; downstream: a task in data_dir.", &E::type),
      field<E>("data.paths", "lm: token files to evaluate.", &E::paths),
      field<E>("data.memmap_dtype", "lm: token file element type (empty: data.memmap_dtype).",
               &E::memmap_dtype),
      ours<E>("data_dir", "downstream: folder with the task JSONL files (empty: $SIAMESE_SHARED_DIR/evals).",
              &E::data_dir),
      field<E>("subset_num_batches", "Batches to evaluate (-1: eval_subset_num_batches).",
               &E::subset_num_batches),
  };
  return fields;
}

const std::vector<Field<GroupOverrideConfig>>& group_override_fields() {
  static const std::vector<Field<G>> fields = {
      field<G>("params",
               "Parameter names or globs (fnmatch: * and ? match dots too), e.g. wte.weight, "
               "topology.blocks.*.c1; each must match a parameter.",
               &G::params),
      field<G>("opts.lr", "Peak learning rate of the group, scaled by the schedule as learning_rate is.",
               &G::lr)
          .at_least(0),
      ours<G>("opts.lr_multiplier", "The group's peak learning rate times this (instead of opts.lr).",
              &G::lr_multiplier)
          .at_least(0),
      field<G>("opts.weight_decay", "Decoupled weight decay of the group.", &G::weight_decay).at_least(0),
      ours<G>("opts.weight_decay_multiplier",
              "The group's weight decay times this (instead of opts.weight_decay).",
              &G::weight_decay_multiplier)
          .at_least(0),
      field<G>("opts.betas", "Adam betas [beta1, beta2] of the group ([]: optimizer.betas).", &G::betas)
          .within(0, 1, false, true),
      field<G>("opts.eps", "Adam epsilon of the group.", &G::eps).positive(),
  };
  return fields;
}

const std::vector<Field<MixtureSourceConfig>>& mixture_source_fields() {
  static const std::vector<Field<Mx>> fields = {
      field<Mx>("source_name", "The source's name, in logs, metrics (mixture/share.<name>) and run.json.",
                &Mx::source_name),
      field<Mx>("target_ratio", "Its share of the run's tokens; the sources' ratios sum to 1.",
                &Mx::target_ratio)
          .within(0, 1, true, false),
      field<Mx>("paths", "Its token files (numpy memmaps of data.memmap_dtype).", &Mx::paths),
      field<Mx>("max_repetition_ratio",
                "Its tokens may be used up to this many times (> 1 upsamples a small source).",
                &Mx::max_repetition_ratio)
          .at_least(1),
      field<Mx>("max_source_fraction", "At most this share of its tokens is used (before repetition).",
                &Mx::max_source_fraction)
          .within(0, 1, true, false),
  };
  return fields;
}

const std::vector<IgnoredKey>& ignored_train_keys() {
  static const std::vector<IgnoredKey> keys = {
      {"dry_run", "not supported"},
      {"no_pre_train_checkpoint", "no checkpoint is written before the first step"},
      {"wandb.log_artifacts", "checkpoints stay in save_folder", {"false", "null"}},
      {"wandb.rank_zero_only", "rank 0 streams; its rows hold every rank's values"},
      {"compile", "no torch.compile in LibTorch"},
      {"fsdp.use_orig_params", "shards are kept apart from the parameters, which keep their names"},
      {"ddp", "gradients are summed once per step; parameters without a gradient contribute zeros"},
      {"speed_monitor", "throughput is always logged"},
      {"save_interval_unsharded", "every checkpoint is written at save_interval (docs/distributed.md)"},
      {"save_num_unsharded_checkpoints_to_keep", "save_num_checkpoints_to_keep counts every checkpoint"},
      {"save_interval_ephemeral", "not supported"},
      {"sharded_checkpointer",
       "one layout: every rank writes its part of the model and of the optimizer state "
       "(docs/distributed.md)"},
      {"remote_save_folder", "not supported"},
      {"max_grad_norm_ratio", "adaptive clipping is not supported", {"null"}},
      {"gen1_gc_interval", "no Python garbage collector"},
      {"stop_at", "use max_duration, or `siamese train --stop-at`", {"null"}},
      {"stop_after", "use max_duration, or `siamese train --stop-at`", {"null"}},
      {"python_profiling", "not supported"},
      {"save_data_indices", "not supported"},
      {"try_load_latest_save", "not supported"},
      {"model.alibi", "positions are RoPE or learned", {"false", "null"}},
      {"model.alibi_bias_max", "positions are RoPE or learned"},
      {"model.moe_interleave", "every block is moe with block_type moe", {"false", "null"}},
      {"model.norm_after", "the topology is model.residual (OLMo-2's norm_after block: reordered)"},
      {"model.attn_norm", "the topology is model.residual (HybridNorm: hybrid)"},
      {"model.ffn_norm", "the topology is model.residual (HybridNorm: hybrid)"},
      {"model.attn_residual_after_norm", "the topology is model.residual (HybridNorm: hybrid)"},
      {"model.ffn_residual_after_norm", "the topology is model.residual (HybridNorm: hybrid)"},
      {"model.norm_pos_special_config", "the topology is model.residual (HybridNorm*: hybrid_star)"},
      {"optimizer.no_decay_norm_and_bias", "deprecated in OLMo; use decay_norm_and_bias"},
      {"optimizer.record_update_metrics", "not supported"},
      {"optimizer.selective_updates", "not supported", {"false", "null"}},
      {"data.datasets",
       "list token files in data.paths, or weighted sources in data.source_mixture",
       {"null", "{}"}},
      {"data.prefetch_factor", "each loader thread holds up to two batches"},
      {"data.persistent_workers", "loader threads always persist"},
      {"data.timeout", "not supported"},
      {"data.label_mask_paths", "not supported", {"null", "[]"}},
      {"data.generate_attention_mask",
       "masks model.pad_token_id tokens, which fixed-length packed instances do not hold; "
       "data.generate_doc_lengths masks documents"},
  };
  return keys;
}

const Field<TrainConfig>& train_field(const std::string& key) {
  const auto& fields = train_fields();
  const auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.key == key; });
  if (it == fields.end()) throw std::logic_error("no config key " + key);
  return *it;
}

const std::vector<IgnoredKey>& ignored_evaluator_keys() {
  static const std::vector<IgnoredKey> keys = {
      {"data.datasets", "list token files in data.paths", {"null", "{}"}},
      {"data.num_workers", "evaluators use the training loader settings"},
      {"data.drop_last", "evaluators use the training loader settings"},
      {"data.pin_memory", "evaluators use the training loader settings"},
      {"device_eval_batch_size", "set the top-level device_eval_batch_size"},
  };
  return keys;
}

std::string accepted_text(const Bounds& b, const std::vector<std::string>& choices) {
  if (!choices.empty()) {
    std::vector<std::string> shown;
    for (const auto& c : choices) shown.push_back(c.empty() ? "\"\"" : c);
    return fmt::format("{}", fmt::join(shown, ", "));
  }
  if (b.min && b.max)
    return fmt::format("{}{}, {}{}", b.min_open ? "(" : "[", *b.min, *b.max, b.max_open ? ")" : "]");
  if (b.min) return fmt::format("{} {}", b.min_open ? ">" : ">=", *b.min);
  if (b.max) return fmt::format("{} {}", b.max_open ? "<" : "<=", *b.max);
  return "";
}

std::string kind_name(Kind kind) {
  switch (kind) {
    case Kind::Int:
      return "an integer";
    case Kind::Double:
      return "a number";
    case Kind::Bool:
      return "true or false";
    case Kind::String:
    case Kind::Parsed:
    case Kind::Enum:
      return "a string";
    case Kind::OptInt:
      return "an integer or null";
    case Kind::OptDouble:
      return "a number or null";
    case Kind::OptBool:
      return "true, false or null";
    case Kind::StringList:
      return "a list of strings";
    case Kind::IntList:
      return "a list of integers";
    case Kind::DoubleList:
      return "a list of numbers";
    case Kind::Evaluators:
      return "a list of evaluator maps";
    case Kind::GroupOverrides:
      return "a list of group override maps";
    case Kind::Sources:
      return "a list of mixture source maps";
  }
  return "?";
}

namespace {

template <class Root>
std::string text_of(const Field<Root>& f, const Root& root);

template <class Entry>
std::string entries_text(const std::vector<Entry>& list, const std::vector<Field<Entry>>& fields) {
  std::vector<std::string> entries;
  for (const auto& entry : list) {
    std::vector<std::string> parts;
    for (const auto& g : fields)
      if (const std::string v = text_of(g, entry); v != "null" && v != "[]")
        parts.push_back(g.key + ": " + v);
    entries.push_back(fmt::format("{{{}}}", fmt::join(parts, ", ")));
  }
  return fmt::format("[{}]", fmt::join(entries, ", "));
}

template <class Root>
std::string text_of(const Field<Root>& f, const Root& root) {
  switch (f.kind) {
    case Kind::Int:
      return std::to_string(f.template ref<int64_t>(root));
    case Kind::Double:
      return fmt::format("{}", f.template ref<double>(root));
    case Kind::Bool:
      return f.template ref<bool>(root) ? "true" : "false";
    case Kind::String:
      return f.template ref<std::string>(root);
    case Kind::Parsed:
      return f.text(root);
    case Kind::Enum:
      return f.choices[f.choice(root)];
    case Kind::OptInt: {
      const auto& v = f.template ref<std::optional<int64_t>>(root);
      return v ? std::to_string(*v) : "null";
    }
    case Kind::OptDouble: {
      const auto& v = f.template ref<std::optional<double>>(root);
      return v ? fmt::format("{}", *v) : "null";
    }
    case Kind::OptBool: {
      const auto& v = f.template ref<std::optional<bool>>(root);
      return v ? (*v ? "true" : "false") : "null";
    }
    case Kind::StringList:
      return fmt::format("[{}]", fmt::join(f.template ref<std::vector<std::string>>(root), ", "));
    case Kind::IntList:
      return fmt::format("[{}]", fmt::join(f.template ref<std::vector<int64_t>>(root), ", "));
    case Kind::DoubleList:
      return fmt::format("[{}]", fmt::join(f.template ref<std::vector<double>>(root), ", "));
    case Kind::Evaluators:
      return f.template ref<std::vector<EvaluatorConfig>>(root).empty() ? "[]" : "[...]";
    // In full, so that a resume that changes an entry names it (training_settings).
    case Kind::GroupOverrides:
      return entries_text(f.template ref<std::vector<GroupOverrideConfig>>(root), group_override_fields());
    case Kind::Sources:
      return entries_text(f.template ref<std::vector<MixtureSourceConfig>>(root), mixture_source_fields());
  }
  return "";
}

template <class Root>
std::string shown_default(const Field<Root>& f) {
  const std::string text = text_of(f, Root{});
  return f.kind == Kind::String || f.kind == Kind::Parsed || f.kind == Kind::Enum ? "\"" + text + "\"" : text;
}

template <class Root>
std::string table(const std::vector<Field<Root>>& fields, const std::string& prefix) {
  std::string out = "| key | type | accepts | default | meaning |\n|---|---|---|---|---|\n";
  for (const auto& f : fields) {
    const std::string accepts = accepted_text(f.bounds, f.choices);
    out += fmt::format("| `{}{}` | {} | {} | `{}` | {}{} |\n", prefix, f.key, kind_name(f.kind),
                       accepts.empty() ? "" : "`" + accepts + "`", shown_default(f), f.ours ? "(ours) " : "",
                       f.doc);
  }
  return out;
}

std::string ignored_list(const std::vector<IgnoredKey>& keys, const std::string& prefix) {
  std::string out;
  for (const auto& k : keys)
    out += fmt::format(
        "- `{}{}`: {}{}\n", prefix, k.key, k.why,
        k.only.empty() ? "" : fmt::format(" (any value but {} is refused)", fmt::join(k.only, " or ")));
  return out;
}

}  // namespace

std::string value_text(const Field<TrainConfig>& field, const TrainConfig& root) {
  return text_of(field, root);
}

std::string value_text(const Field<EvaluatorConfig>& field, const EvaluatorConfig& root) {
  return text_of(field, root);
}

std::string value_text(const Field<GroupOverrideConfig>& field, const GroupOverrideConfig& root) {
  return text_of(field, root);
}

std::string value_text(const Field<MixtureSourceConfig>& field, const MixtureSourceConfig& root) {
  return text_of(field, root);
}

std::string markdown() {
  return "### Run keys\n\n" + table(train_fields(), "") +
         "\n### Evaluator keys (each entry of `evaluators`)\n\n" +
         table(evaluator_fields(), "evaluators[i].") +
         "\n### Group override keys (each entry of `optimizer.group_overrides`)\n\n" +
         table(group_override_fields(), "optimizer.group_overrides[i].") +
         "\n### Mixture source keys (each entry of `data.source_mixture`)\n\n" +
         table(mixture_source_fields(), "data.source_mixture[i].") +
         "\n### OLMo keys accepted and ignored (a warning names each)\n\n" +
         ignored_list(ignored_train_keys(), "") + ignored_list(ignored_evaluator_keys(), "evaluators[i].");
}

}  // namespace siamese::config::schema
