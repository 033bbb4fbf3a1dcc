#pragma once
// Lookups over the table of residual topologies (topologies.h): names, descriptions, the
// settings each requires, and building one.
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

// The table as Markdown (name, streams, settings it turns on, update rule), the end of
// `siamese config --schema` and of docs/configuration.md.
std::string topologies_markdown();

// Builds cfg.residual's topology after check_model_config.
std::shared_ptr<TopologyImpl> make_topology(const ModelConfig& cfg);

// A model config this code can build: a known topology (the error lists the names), the
// settings it requires on, and validate_model (config/validate.h). Throws siamese::Error
// naming the model.* key and the fix.
void check_model_config(const ModelConfig& cfg);

// Boolean keys ("model.use_query_norm", ...) that topology `name` is defined with on
// (HybridNorm's per-head Q/K/V norms); empty for most topologies and unknown names.
const std::vector<std::string>& settings_required_by(const std::string& name);
// Turns those settings on in `cfg` (configs built in code; a config file goes through
// load_run_config, which also refuses one that sets them off).
void apply_required_settings(ModelConfig& cfg);

}  // namespace siamese::model
