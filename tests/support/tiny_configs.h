#pragma once
// The tiny training run the end-to-end tests start from: a 2-layer hybrid_pre model with
// dropout on the built-in arithmetic corpus, 8 steps of 4 sequences on the CPU.
#include <filesystem>

#include "siamese/config/config.h"

namespace siamese::testing {

inline TrainConfig tiny(const std::filesystem::path& folder) {
  TrainConfig c;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_layers = 2;
  c.model.max_sequence_length = 32;
  c.model.vocab_size = 256;
  c.model.embedding_size = 256;
  c.model.eos_token_id = 10;
  c.model.pad_token_id = 10;
  c.model.residual = "hybrid_pre";
  c.model.rope = true;
  c.model.use_query_norm = c.model.use_key_norm = c.model.use_value_norm = true;
  c.model.attention_dropout = 0.1;  // dropout on: resume must restore the RNG
  c.model.residual_dropout = 0.1;
  c.data.synthetic = "arithmetic";
  c.global_train_batch_size = 4;
  c.device_train_microbatch_size = 2;
  c.max_duration = "8";
  c.scheduler.t_warmup = 3;
  c.optimizer.learning_rate = 3e-3;
  c.max_grad_norm = 1.0;
  c.save_folder = folder.string();
  c.save_interval = 1000;
  c.eval_interval = 1000;
  c.eval_subset_num_batches = 2;
  c.console_log_interval = 100;
  c.device = "cpu";
  return c;
}

}  // namespace siamese::testing
