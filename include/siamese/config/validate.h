#pragma once
// The rules a config must satisfy before any work starts. load_config applies them; call
// them directly for configs built in code.
#include <functional>
#include <string>

#include "siamese/config/config.h"

namespace siamese::config {

// Maps a dotted key ("model.n_heads", "evaluators[0].type") to where the user set it,
// e.g. "configs/tiny/base.yaml:12 (model.n_heads)"; used in error messages.
using KeyLocator = std::function<std::string(const std::string& key)>;

// Each key's accepted values (the schema table's ranges and choices), then the rules
// between keys (d_model % n_heads, n_heads % n_kv_heads, embedding_size >= vocab_size,
// max_duration syntax, ...). Throws siamese::Error naming the key and the fix.
void validate(const TrainConfig& config, const KeyLocator& where = {});

// The model section alone (configs built in code, a checkpoint's model): the values of the
// model.* keys and the rules between them that make a buildable network. validate() adds
// what only a run needs (token ids within the table, init_device, a named topology).
void validate_model(const ModelConfig& model, const KeyLocator& where = {});

// The batch-size rules that depend on how many ranks train: global_train_batch_size must
// split evenly over `world_size` ranks and each rank's share into microbatches.
void validate_for_world_size(const TrainConfig& config, int world_size, const KeyLocator& where = {});

}  // namespace siamese::config
