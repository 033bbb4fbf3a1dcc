#pragma once
// Reading a run configuration: OLMo-style YAML + `${...}` interpolation + MODEL_TYPE +
// command-line overrides, parsed once through the schema table (schema.h) and validated
// before any work starts. Every problem is a siamese::Error naming file, line, dotted key
// and the fix.
#include <map>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/config/validate.h"

namespace siamese::config {

// Where model.residual's effective value came from, for the start-up line
// "topology: hybrid_pre (from MODEL_TYPE)".
struct ConfigOrigin {
  std::string topology;  // "path:line", "MODEL_TYPE", "--model.residual" or "default"
  std::map<std::string, std::string> explicit_keys;  // keys the user set -> where
};

// What a launch tells the config besides the file and its overrides. Passed in rather than
// read here, so that loading a saved config (a checkpoint's) never picks up the caller's
// environment; `${oc.env:...}` interpolations are the file's own explicit requests.
struct LaunchSettings {
  std::string model_type;  // MODEL_TYPE: the topology (a sweep cell); "" for none
  int world_size = 1;      // WORLD_SIZE: the ranks the batch sizes must split over
};
// MODEL_TYPE and WORLD_SIZE of this process; a WORLD_SIZE that is not a positive integer is
// an Error.
LaunchSettings launch_settings_from_env();

// Reads `path`, applies launch.model_type to model.residual, then `overrides` (precedence:
// override > MODEL_TYPE > YAML > default), resolves interpolations, parses and validates
// for launch.world_size. Overrides are "--model.d_model=256", "model.d_model=256", or
// "--model.d_model" followed by "256"; values are YAML ("--optimizer.betas=[0.9,0.99]",
// "--max_grad_norm=null").
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                        const LaunchSettings& launch = {}, ConfigOrigin* origin = nullptr);

// A config given as text (a resolved config carried inside another file, such as an
// exported model's config.json); `where` names it in messages. No launch settings apply.
TrainConfig load_config_text(const std::string& text, const std::string& where);

// The model section of an OLMo checkpoint's config.json (`model_config_full`, or the whole
// file) read through the schema by OLMo's key names, with the same type checks as
// load_config; keys the schema does not have are left to the caller. Not validated.
ModelConfig read_olmo_model(const std::string& config_json);

// The fully resolved config as YAML; load_config on this text yields an identical config.
std::string to_yaml(const TrainConfig& config);

}  // namespace siamese::config
