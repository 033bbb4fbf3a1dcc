#pragma once
// The small configs tests build models and runs from.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/model/topology_table.h"

namespace siamese::testing {

// The sizes of a small test model; each test picks the ones it is about.
struct TinyShape {
  int64_t d_model = 32;
  int64_t n_heads = 4;
  int64_t n_layers = 2;
  int64_t vocab_size = 61;
  int64_t embedding_size = 64;
  int64_t max_sequence_length = 32;
};

// The SiameseNorm couplings (issue 29) beyond post_pre and hybrid_pre, as topology entries
// "siamese/<model.siamese.x_stream>" that suites looping over topology names run as well.
inline const std::vector<std::string> kSiameseCouplings = {
    "siamese/deepnorm", "siamese/mixln",       "siamese/peri",     "siamese/lns",
    "siamese/pre",      "siamese/hybrid_star", "siamese/reordered"};

// model.siamese.x_stream's value spelled `name` ("post", "deepnorm", ...).
inline config::XStream x_stream_named(const std::string& name) {
  const auto value = config::enum_named<config::XStream>(name);
  if (!value) throw std::invalid_argument("no x_stream placement named " + name);
  return *value;
}

// Sets model.residual (and model.siamese.x_stream for a "siamese/<x_stream>" entry) and turns
// on the settings the topology is defined with.
inline void set_topology(config::ModelConfig& c, const std::string& entry) {
  const auto slash = entry.find('/');
  c.residual = entry.substr(0, slash);
  if (slash != std::string::npos) c.siamese.x_stream = x_stream_named(entry.substr(slash + 1));
  model::apply_required_settings(c);
}

// A topology entry as command-line overrides (" --model.residual=siamese
// --model.siamese.x_stream=deepnorm") and as a folder name ("siamese_deepnorm").
inline std::string topology_flags(const std::string& entry) {
  const auto slash = entry.find('/');
  if (slash == std::string::npos) return " --model.residual=" + entry;
  return " --model.residual=" + entry.substr(0, slash) +
         " --model.siamese.x_stream=" + entry.substr(slash + 1);
}
inline std::string topology_label(std::string entry) {
  for (auto& ch : entry)
    if (ch == '/') ch = '_';
  return entry;
}

// A model of `shape` with dropout off, the settings `residual` is defined with turned on and
// its own defaults (mhc's 4 streams); every other key keeps its default (tests set norm type, biases or RoPE
// themselves).
inline config::ModelConfig tiny_model(const std::string& residual, const TinyShape& shape = {}) {
  config::ModelConfig c;
  c.d_model = shape.d_model;
  c.n_heads = shape.n_heads;
  c.n_layers = shape.n_layers;
  c.vocab_size = shape.vocab_size;
  c.embedding_size = shape.embedding_size;
  c.max_sequence_length = shape.max_sequence_length;
  c.attention_dropout = c.residual_dropout = c.embedding_dropout = 0.0;
  set_topology(c, residual);
  model::apply_topology_defaults(c);
  return c;
}

// The tiny training run the end-to-end tests start from: a 2-layer hybrid_pre model with
// dropout on the built-in arithmetic corpus, 8 steps of 4 sequences on the CPU.
inline config::TrainConfig tiny(const std::filesystem::path& folder) {
  config::TrainConfig c;
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
  c.data.synthetic = config::SyntheticCorpus::Arithmetic;
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
