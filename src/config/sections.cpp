#include "siamese/config/sections.h"

namespace siamese::config {

DataSection data_section(const TrainConfig& c) {
  const int64_t tokens_per_step = c.global_train_batch_size * c.model.max_sequence_length;
  return {c.data,
          c.model.max_sequence_length,
          c.model.vocab_size,
          static_cast<uint64_t>(c.data.seed.value_or(c.seed)),
          c.global_train_batch_size,
          c.data.source_mixture.empty() ? 0 : run_steps(c, 0) * tokens_per_step};
}

int64_t run_steps(const TrainConfig& c, int64_t steps_per_epoch) {
  const Duration& d = c.max_duration;
  const int64_t tokens_per_step = c.global_train_batch_size * c.model.max_sequence_length;
  return d.unit() == Duration::Steps    ? d.value()
         : d.unit() == Duration::Tokens ? (d.value() + tokens_per_step - 1) / tokens_per_step
                                        : d.value() * steps_per_epoch;
}

StepSection step_section(const TrainConfig& c) {
  StepSection s;
  s.global_batch = c.global_train_batch_size;
  s.precision = c.precision;
  s.max_grad_norm = c.max_grad_norm;
  if (c.softmax_auxiliary_loss) s.z_loss_multiplier = c.auxiliary_loss_multiplier;
  s.instance_filter = c.data.instance_filter.enabled();
  s.generate_doc_lengths = c.data.generate_doc_lengths;
  s.rope_restart_per_document = c.data.rope_restart_per_document;
  s.cuda_graphs = c.cuda_graphs;
  s.moe = c.model.is_moe();
  s.activation_checkpointing = c.model.activation_checkpointing;
  s.dropout = c.model.attention_dropout > 0 || c.model.residual_dropout > 0 || c.model.embedding_dropout > 0;
  return s;
}

ReportSection report_section(const TrainConfig& c) {
  ReportSection s;
  s.model = c.model;
  s.global_batch = c.global_train_batch_size;
  s.console_log_interval = c.console_log_interval;
  s.peak_tflops = c.peak_tflops;
  s.precision = c.precision;
  s.allow_tf32 = c.allow_tf32;
  s.loss_spike_factor = c.loss_spike_factor;
  s.max_bad_steps = c.max_bad_steps;
  s.auxiliary_loss_multiplier = c.auxiliary_loss_multiplier;
  s.instance_filter = c.data.instance_filter.enabled();
  s.wandb = c.wandb;
  return s;
}

EvalSection eval_section(const TrainConfig& c) {
  return {c.evaluators, data_section(c), c.tokenizer, c.device_eval_batch_size, c.eval_subset_num_batches};
}

ParallelSection parallel_section(const TrainConfig& c) {
  ParallelSection s;
  s.strategy = c.distributed_strategy;
  s.fsdp = c.fsdp;
  s.distributed = c.distributed;
  s.precision = c.precision;
  s.residual = c.model.residual;
  s.activation_checkpointing = c.model.activation_checkpointing;
  s.moe = c.model.is_moe();
  return s;
}

bool ParallelSection::shards_optimizer_state() const {
  return strategy == DistributedStrategy::Fsdp && fsdp.sharding_strategy != ShardingStrategy::NoShard;
}

bool ParallelSection::shards_parameters() const {
  return strategy == DistributedStrategy::Fsdp && (fsdp.sharding_strategy == ShardingStrategy::FullShard ||
                                                   fsdp.sharding_strategy == ShardingStrategy::HybridShard);
}

}  // namespace siamese::config
