#pragma once
// Run configuration as plain structs. Key names and defaults follow OLMo's config.py
// (allenai/OLMo, olmo/config.py) so OLMo YAML files read the same here; fields marked
// "ours" are this project's additions (docs/configuration.md). The YAML schema that maps
// dotted keys onto these fields lives in src/config/schema.cpp, in one table.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "siamese/config/device.h"
#include "siamese/config/duration.h"
#include "siamese/config/enums.h"

namespace siamese::config {

// SiameseNorm ablation switches (paper Sec. 4 ablations); all on = the paper's model.
struct SiameseConfig {
  bool depth_scaling = true;     // divide X-stream updates by c_l = sqrt(2(l+1))
  bool fused_input_norm = true;  // LN on the fused sublayer input
  bool gamma = true;             // learnable vector on X before attention (hybrid_pre c1)
  // X's placement, a single-stream topology (model.residual=siamese; unset: post); post_pre
  // and hybrid_pre fix it to post and hybrid.
  XStream x_stream = XStream::Unset;
};

// ours: the custom kernel families (kernels/families.h), each on or off: off takes the ATen
// composition, a way around a kernel that misbehaves on some hardware without a rebuild.
struct KernelsConfig {
  KernelChoice all = KernelChoice::Fused;  // every family without a choice of its own
  KernelChoice norm = KernelChoice::Unset;
  KernelChoice swiglu = KernelChoice::Unset;
  KernelChoice cross_entropy = KernelChoice::Unset;
  KernelChoice rope = KernelChoice::Unset;
  KernelChoice qkv_heads = KernelChoice::Unset;
};

// ours: the base shape of model.parametrization mup / completep: the size whose learning rates,
// init and multipliers the config states. Unset: the model's own (every multiplier 1).
struct MupConfig {
  std::optional<int64_t> base_d_model;
  std::optional<int64_t> base_n_heads;
  std::optional<int64_t> base_n_layers;
  double depth_alpha = 1.0;  // completep: residual branches times (n_layers / base)^-alpha
};

struct ModelConfig {
  int64_t d_model = 768;
  int64_t n_heads = 12;
  std::optional<int64_t> n_kv_heads;  // unset = n_heads (MHA); 1 = MQA
  std::optional<double> clip_qkv;
  int64_t n_layers = 12;
  int64_t mlp_ratio = 4;
  std::optional<int64_t> mlp_hidden_size;  // overrides mlp_ratio * d_model
  Activation activation_type = Activation::SwiGLU;
  BlockType block_type = BlockType::Sequential;  // moe: the MLP is a sparse MoE (mlp.h)
  bool is_moe() const { return block_type == BlockType::Moe; }
  bool rope = false;
  bool rope_full_precision = true;
  double rope_theta = 10000.0;
  // OLMo-core's sliding_window.pattern (OLMo-3: [4096, 4096, 4096, -1]): layer l attends
  // through window pattern[l % size] (w keys, itself included), -1 for full causal
  // attention. Empty: every layer full.
  std::vector<int64_t> sliding_window_pattern;
  bool flash_attention = false;
  // OLMo's top-level activation_checkpointing: "" (off), whole_layer, one_in_two,
  // one_in_three, one_in_four (which blocks recompute their activations in backward).
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::None;
  // OLMo's top-level fused_loss: the LM head and the loss run over fused_loss_chunk_tokens
  // tokens at a time and never hold every logit (lm_loss.h: chunked_loss_sums). Unset
  // (OLMo's null) is off.
  std::optional<bool> fused_loss;
  int64_t fused_loss_chunk_tokens = 256;  // ours
  double attention_dropout = 0.1;
  bool multi_query_attention = false;
  bool attention_layer_norm = false;  // OLMo's full-width Q,K norms
  double residual_dropout = 0.1;
  double embedding_dropout = 0.1;
  bool embedding_layer_norm = false;
  LayerNormType layer_norm_type = LayerNormType::Default;
  bool layer_norm_with_affine = true;
  double layer_norm_eps = 1e-5;
  bool attention_layer_norm_with_affine = true;
  int64_t max_sequence_length = 1024;
  bool include_bias = true;
  std::optional<bool> bias_for_layer_norm;  // unset = include_bias
  bool scale_logits = false;
  int64_t vocab_size = 50257;
  int64_t embedding_size = 50304;
  bool weight_tying = true;
  int64_t eos_token_id = 50256;
  int64_t pad_token_id = 50256;
  InitDevice init_device = InitDevice::Cpu;
  InitFn init_fn = InitFn::Normal;
  double init_std = 0.02;
  std::optional<double> init_cutoff_factor;
  std::optional<double> emb_init_std;
  bool scale_emb_init = false;
  // HybridNorm's per-head QKV norms (names from the HybridNorm repository's config).
  bool use_query_norm = false;
  bool use_key_norm = false;
  bool use_value_norm = false;
  // OLMoE's sparse feed-forward (block_type moe; mlp.h). OLMo's names and defaults.
  int64_t moe_num_experts = 8;
  int64_t moe_top_k = 2;
  MoeImpl moe_mlp_impl = MoeImpl::Sparse;
  bool moe_log_expert_assignment = false;
  bool moe_shared_expert = false;
  bool moe_lbl_in_fp32 = false;
  double moe_loss_weight = 0.1;
  std::optional<double> moe_zloss_weight;  // unset = no router z-loss
  bool moe_dropless = true;
  double moe_capacity_factor = 1.25;
  bool moe_norm_topk_prob = false;  // ours: transformers' norm_topk_prob (OLMoE: false)
  // ours: DeepSeek-V3's auxiliary-loss-free balancing (OLMo-core's bias_gamma): a per-expert
  // bias on the scores for the top-k choice only, moved by this after each step toward the
  // mean load (unset: no bias).
  std::optional<double> moe_router_bias_rate;
  LbLossGranularity moe_lb_loss_granularity = LbLossGranularity::LocalBatch;  // ours

  // ours
  std::string residual = "pre";  // the topology; MODEL_TYPE values (src/model/topologies)
  SiameseConfig siamese;
  KernelsConfig kernels;
  config::Parametrization parametrization = config::Parametrization::Standard;
  MupConfig mup;
  double mixln_alpha = 0.25;  // Mix-LN: first floor(alpha*L) layers are Post-Norm
  int64_t hc_rate = 2;        // Hyper-Connections expansion rate n
  bool hc_dynamic = true;     // DHC (dynamic) vs SHC (static)
  // mHC / mHC-lite (topologies mhc, mhc_lite): Sinkhorn-Knopp iterations, the epsilon that
  // transformers' DeepseekV4HyperConnection adds to the pre weights and inside Sinkhorn, and
  // the factor on the post weights' sigmoid.
  int64_t mhc_sinkhorn_iters = 20;
  double mhc_eps = 1e-6;
  double mhc_post_scale = 2.0;
  // Block AttnRes (topology attnres): sublayers per block; 0 = Full AttnRes.
  int64_t attnres_block_size = 0;
  // DeepCrossAttention (topology dca): a block reads the first and the last dca_past_layers
  // block outputs (the embeddings count as the first), all of them while there are at most
  // twice as many.
  int64_t dca_past_layers = 2;
  // The learnable scalars of the point-wise norms (layer_norm_type dyt / derf) start here.
  double dyt_alpha_init = 0.5;   // DyT: weight * tanh(alpha x) + bias
  double derf_alpha_init = 0.5;  // Derf: weight * erf(alpha x + shift) + bias
  double derf_shift_init = 0.0;
};

// ours: Muon's settings (optimizer.name muon: train/muon.h). The hidden layers' matrices are
// Muon's; the other parameters keep AdamW with the settings of OptimizerConfig.
struct MuonConfig {
  std::optional<double> learning_rate;  // unset = optimizer.learning_rate
  std::optional<double> weight_decay;   // unset = optimizer.weight_decay
  double momentum = 0.95;
  bool nesterov = true;
  int64_t ns_steps = 5;
  MuonLrAdjust adjust_lr = MuonLrAdjust::MatchRmsAdamW;
};

// One entry of optimizer.group_overrides, OLMo-core's OptimGroupOverride: the parameters whose
// names match any glob of `params` (Python fnmatch rules) take these settings in place of
// their group's. Unset values keep the group's; a multiplier scales it (ours).
struct GroupOverrideConfig {
  std::vector<std::string> params;
  std::optional<double> lr, lr_multiplier;
  std::optional<double> weight_decay, weight_decay_multiplier;
  std::vector<double> betas;  // empty: the group's
  std::optional<double> eps;
};

struct OptimizerConfig {
  OptimizerName name = OptimizerName::AdamW;
  double learning_rate = 1e-4;
  double weight_decay = 0.01;
  std::vector<double> betas = {0.9, 0.95};
  double eps = 1e-5;
  bool decay_norm_and_bias = false;
  bool decay_embeddings = false;
  std::optional<int64_t> metrics_log_interval;
  MuonConfig muon;  // ours
  // ours: the topology's own tensors (mixing weights, gains, lambdas; not its norms) form a
  // group of their own, with learning_rate * this and this weight decay.
  double topology_lr_multiplier = 1.0;
  double topology_weight_decay = 0.0;
  std::vector<GroupOverrideConfig> group_overrides;
};

struct SchedulerConfig {
  SchedulerName name = SchedulerName::CosineWithWarmup;
  ScheduleUnits units = ScheduleUnits::Steps;
  double t_warmup = 100;
  std::optional<double> t_max;  // unset = the run's max duration
  double alpha_f = 0.1;
  std::optional<double> warmup_min_lr;
  // wsd: the decay at the end of t_max, t_decay long (scheduler units) or decay_fraction of
  // t_max (OLMo-core's default 0.1 when neither is set), of decay_shape.
  std::optional<double> t_decay;
  std::optional<double> decay_fraction;
  DecayShape decay_shape = DecayShape::Linear;
};

// OLMo-2's repeated-n-gram filter (OLMo-core's InstanceFilterConfig; data/instance_filter.h).
// The filter is on when any of the three is set; unset ones take OLMo's values 13, 1, 32.
struct InstanceFilterConfig {
  std::optional<int64_t> repetition_max_period;
  std::optional<int64_t> repetition_min_period;
  std::optional<int64_t> repetition_max_count;
  bool enabled() const { return repetition_max_period || repetition_min_period || repetition_max_count; }
  int64_t max_period() const { return repetition_max_period.value_or(13); }
  int64_t min_period() const { return repetition_min_period.value_or(1); }
  int64_t max_count() const { return repetition_max_count.value_or(32); }
};

// One source of a weighted mixture (data.source_mixture), as OLMo-core's SourceMixtureConfig
// (data/source_mixture.h).
struct MixtureSourceConfig {
  std::string source_name;
  double target_ratio = 0;  // its share of the run's tokens; the sources' sum to 1
  std::vector<std::string> paths;
  double max_repetition_ratio = 1;  // its tokens may be used up to this many times
  double max_source_fraction = 1;   // at most this share of its tokens (before repetition)
};

struct DataConfig {
  std::vector<std::string> paths;
  std::vector<MixtureSourceConfig> source_mixture;  // instead of paths
  TokenDtype memmap_dtype = TokenDtype::Uint16;
  Side pad_direction = Side::Right;
  bool drop_last = false;
  int64_t num_workers = 0;
  bool pin_memory = false;
  std::optional<int64_t> seed;  // unset = top-level seed
  // ours: the built-in synthetic corpus used when `paths` is empty (quickstart, tests).
  SyntheticCorpus synthetic = SyntheticCorpus::None;
  int64_t arithmetic_digits = 3;           // ours: operands of the arithmetic corpus have up to N digits
  bool generate_doc_lengths = false;       // attention stays within the documents model.eos_token_id closes
  bool rope_restart_per_document = false;  // ours: with generate_doc_lengths, RoPE counts from each document
  InstanceFilterConfig instance_filter;
};

struct TokenizerConfig {
  std::string identifier = "gpt2";
  Side truncate_direction = Side::Right;
};

struct EvaluatorConfig {
  std::string label;
  EvaluatorType type = EvaluatorType::Lm;
  std::vector<std::string> paths;          // lm: token files
  std::optional<TokenDtype> memmap_dtype;  // lm: unset = data.memmap_dtype
  std::string data_dir = "";               // downstream: folder with <task>.jsonl (ours)
  int64_t subset_num_batches = -1;
};

// ours: data parallelism across ranks (torchrun / srun launches; docs/distributed.md).
struct DistributedConfig {
  double bucket_mb = 25;          // gradient all-reduce bucket size (PyTorch DDP's default)
  bool overlap = true;            // launch bucket all-reduces from backward hooks
  int64_t timeout_seconds = 600;  // a rank silent this long fails the others, not hangs them
  CommBackend backend = CommBackend::Auto;
};

// OLMo's fsdp section, read when distributed_strategy is fsdp (docs/distributed.md).
struct FsdpConfig {
  ShardingStrategy sharding_strategy = ShardingStrategy::FullShard;
  FsdpPrecision precision = FsdpPrecision::Pure;
  WrappingStrategy wrapping_strategy = WrappingStrategy::None;  // the units gradients are sharded in
  // HYBRID_SHARD: copies of the model, each sharded over world / replicas ranks (unset: one per node)
  std::optional<int64_t> hybrid_sharding_num_model_replicas;
};

// OLMo's wandb section: metrics streamed to Weights & Biases as the run trains
// (train/wandb_stream.h), on when project is set.
struct WandbConfig {
  std::string project = "";
  std::string entity = "";
  std::string group = "";
  std::string name = "";  // "": the run folder's name
  std::vector<std::string> tags;
  int64_t log_interval = 1;
  bool enabled() const { return !project.empty(); }
};

struct TrainConfig {
  std::string run_name = "";
  int64_t seed = 6198;
  std::string save_folder = "./";
  int64_t save_interval = 1000;
  int64_t save_num_checkpoints_to_keep = -1;
  bool save_overwrite = false;
  bool save_async = false;
  std::string load_path = "";
  // A stable WSD run's checkpoint this run branches its decay from (train/decay_branch.h).
  std::string decay_from = "";
  Duration max_duration{"10000"};    // steps "1000", tokens "2e9T", epochs "1ep" (duration.h)
  std::optional<double> time_limit;  // seconds from start-up; then a checkpoint and a clean stop
  int64_t global_train_batch_size = 512;
  int64_t device_train_microbatch_size = 16;
  int64_t device_eval_batch_size = 16;
  Precision precision = Precision::Fp32;
  std::optional<double> max_grad_norm;
  // OLMo's z-loss: auxiliary_loss_multiplier * mean over predicted tokens of
  // logsumexp(logits)^2, added to the training loss.
  bool softmax_auxiliary_loss = false;
  double auxiliary_loss_multiplier = 1e-4;
  int64_t eval_interval = 1000;
  int64_t eval_subset_num_batches = -1;
  int64_t console_log_interval = 1;
  WandbConfig wandb;
  bool torch_profiling = false;
  std::optional<int64_t> stream_stats_interval;  // ours: train/stream_stats_log.h (unset: off)  // a few
                                                 // steps as a Chrome trace per rank (train/step_profiler.h)
  DeviceSetting device{"auto"};                  // ours: auto | cpu | cuda | cuda:N (device.h)
  // ours (trainer): hardware peak for MFU in TFLOP/s per rank (unset: MFU not reported),
  // how many non-finite steps to skip before stopping, and the loss-spike threshold as a
  // multiple of the running median loss.
  std::optional<double> peak_tflops;
  bool allow_tf32 = true;    // ours: TF32 tensor cores for fp32 matmuls and convolutions on CUDA
  bool cuda_graphs = false;  // ours: micro-batches replayed as a CUDA graph (train/micro_batch_graph.h)
  int64_t max_bad_steps = 0;
  // ours: amp_fp16's dynamic loss scale (loss_scale.h): its start and how many steps in a
  // row without an overflow double it.
  double fp16_initial_loss_scale = 65536.0;
  int64_t fp16_loss_scale_growth_interval = 2000;
  double loss_spike_factor = 2.0;

  ModelConfig model;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  DataConfig data;
  TokenizerConfig tokenizer;
  std::vector<EvaluatorConfig> evaluators;
  DistributedConfig distributed;
  DistributedStrategy distributed_strategy = DistributedStrategy::Ddp;  // OLMo's default is fsdp
  FsdpConfig fsdp;
};

}  // namespace siamese::config
