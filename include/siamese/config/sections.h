#pragma once
// The parts of a TrainConfig that one component reads, cut from the whole config here and
// only here. A component takes its section, so its signature says what it depends on, and a
// new top-level key reaches exactly the components whose section carries it. The YAML stays
// OLMo's flat layout; sections are a C++ view of it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/config/duration.h"

namespace siamese::config {

// The training data (data/token_dataset.h, data/rank_batches.h).
struct DataSection {
  DataConfig data;
  int64_t sequence_length = 0;  // model.max_sequence_length: an instance's tokens
  int64_t vocab_size = 0;       // model.vocab_size: token ids stay below it
  uint64_t seed = 0;            // data.seed, else seed: the batch order, the synthetic corpus
  int64_t global_batch = 0;     // global_train_batch_size
  // data.source_mixture: the run's tokens, whole global batches of max_duration.
  int64_t requested_tokens = 0;
};
DataSection data_section(const TrainConfig& c);

// max_duration in steps: as given, tokens rounded up to whole global batches (OLMo), or
// epochs of `steps_per_epoch` (only read for those).
int64_t run_steps(const TrainConfig& c, int64_t steps_per_epoch);

// One optimizer step (train/train_step.h); the model's own settings come from the model.
struct StepSection {
  int64_t global_batch = 0;  // global_train_batch_size: the loss normaliser's sequences
  Precision precision = Precision::Fp32;
  std::optional<double> max_grad_norm;
  std::optional<double> z_loss_multiplier;  // softmax_auxiliary_loss: auxiliary_loss_multiplier
  bool instance_filter = false;             // data.instance_filter: ranks' shares may differ
  bool generate_doc_lengths = false;        // data.generate_doc_lengths
  bool rope_restart_per_document = false;   // data.rope_restart_per_document
  // cuda_graphs, and what decides whether it can apply (train/micro_batch_graph.h).
  bool cuda_graphs = false;
  bool moe = false;
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::None;
  bool dropout = false;  // any of the model's dropouts above 0
};
StepSection step_section(const TrainConfig& c);

// What the run reports of its steps (train/step_reporter.h).
struct ReportSection {
  ModelConfig model;  // the FLOPs per token, MoE's logging
  int64_t global_batch = 0;
  int64_t console_log_interval = 1;
  std::optional<double> peak_tflops;      // null: the device's from train/device_peaks.h
  Precision precision = Precision::Fp32;  // with allow_tf32, the peak's number format
  bool allow_tf32 = true;
  double loss_spike_factor = 2.0;
  int64_t max_bad_steps = 0;
  double auxiliary_loss_multiplier = 0;  // named in the fix for a non-finite z-loss
  bool instance_filter = false;          // rows carry filtered_instances
  WandbConfig wandb;                     // streams the rows when enabled
};
ReportSection report_section(const TrainConfig& c);

// The evaluators during training (eval/evaluators.h).
struct EvalSection {
  std::vector<EvaluatorConfig> evaluators;
  DataSection data;  // the synthetic corpus's held-out problems, the token files' dtype
  TokenizerConfig tokenizer;
  int64_t batch_size = 0;           // device_eval_batch_size
  int64_t subset_num_batches = -1;  // eval_subset_num_batches
};
EvalSection eval_section(const TrainConfig& c);

// How the run spreads over ranks (train/parallelize.h, train/memory_plan.h).
struct ParallelSection {
  DistributedStrategy strategy = DistributedStrategy::Ddp;
  FsdpConfig fsdp;
  DistributedConfig distributed;
  Precision precision = Precision::Fp32;
  std::string residual;  // model.residual: whether the topology rewrites whole matrices
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::None;
  bool moe = false;
  // distributed_strategy fsdp with a sharding strategy other than NO_SHARD (which is the ddp
  // path): gradients and optimizer state are sharded over the ranks.
  bool shards_optimizer_state() const;
  // distributed_strategy fsdp with a sharding strategy that keeps only a shard of each
  // block's parameters between uses (FULL_SHARD, HYBRID_SHARD).
  bool shards_parameters() const;
};
ParallelSection parallel_section(const TrainConfig& c);
inline bool shards_optimizer_state(const TrainConfig& c) {
  return parallel_section(c).shards_optimizer_state();
}
inline bool shards_parameters(const TrainConfig& c) { return parallel_section(c).shards_parameters(); }

}  // namespace siamese::config
