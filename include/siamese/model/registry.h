#pragma once
// The table of residual topologies (MODEL_TYPE values): name -> factory. Adding a
// topology = one file in src/model/topologies/ + one line in src/model/registry.cpp.
#include <memory>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/model/topology.h"

namespace siamese::model {

// Registered topology names, in table order.
const std::vector<std::string>& topology_names();

// One-line description of a topology (its update rule), for --help and inspect.
const std::string& topology_description(const std::string& name);

// Builds cfg.residual's topology; throws siamese::Error for an unknown name.
std::shared_ptr<TopologyImpl> make_topology(const ModelConfig& cfg);

// Model-level validation: unknown topology (lists the valid names), sizes that do not
// divide (d_model by n_heads, n_heads by n_kv_heads), unknown activation / norm / init
// names, a topology requiring QKV norms without them, attention_layer_norm combined
// with per-head Q/K norms. Throws siamese::Error naming the model.* key and the fix.
void check_model_config(const ModelConfig& cfg);

// Boolean keys ("model.use_query_norm", ...) that topology `name` is defined with on
// (HybridNorm's per-head Q/K/V norms); empty for most topologies and unknown names.
const std::vector<std::string>& settings_required_by(const std::string& name);
// Turns those settings on in `cfg` (configs built in code; a config file goes through
// load_run_config, which also refuses one that sets them off).
void apply_required_settings(ModelConfig& cfg);

}  // namespace siamese::model
