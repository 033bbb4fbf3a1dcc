#pragma once
// Reading a run configuration: OLMo-style YAML + `${...}` interpolation + MODEL_TYPE +
// command-line overrides, parsed once through the schema table (schema.h) and validated
// before any work starts. Every problem is a siamese::Error naming file, line, dotted key
// and the fix.
#include <map>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "siamese/config/config.h"
#include "siamese/config/validate.h"

namespace siamese {

// Where model.residual's effective value came from, for the start-up line
// "topology: hybrid_pre (from MODEL_TYPE)".
struct ConfigOrigin {
  std::string topology;  // "path:line", "MODEL_TYPE", "--model.residual" or "default"
  std::map<std::string, std::string> explicit_keys;  // keys the user set -> where
};

// Reads `path`, applies MODEL_TYPE to model.residual, then `overrides` (precedence:
// override > MODEL_TYPE > YAML > default), resolves interpolations, parses and validates
// (world size from WORLD_SIZE, else 1). Overrides are "--model.d_model=256",
// "model.d_model=256", or "--model.d_model" followed by "256"; values are YAML
// ("--optimizer.betas=[0.9,0.99]", "--max_grad_norm=null").
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                        ConfigOrigin* origin = nullptr);

// The model section of an OLMo config (a checkpoint's config.json `model_config_full`) read
// through the schema by OLMo's key names, with the same type checks as load_config; keys the
// schema does not have are left to the caller. Not validated.
ModelConfig read_olmo_model(const YAML::Node& model, const std::string& where);

// The fully resolved config as YAML; load_config on this text yields an identical config.
std::string to_yaml(const TrainConfig& config);

}  // namespace siamese
