#pragma once
// The one correspondence between a siamese Pre-Norm model and Hugging Face's
// LlamaForCausalLM, in both directions (export writes it, import reads it).
// att_proj's rows are [q | k | v]; ff_proj's first half is SwiGLU's value (Llama's up_proj),
// its second the gate (gate_proj).
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "siamese/config/config.h"
#include "siamese/export/safetensors.h"

namespace siamese::hf {

// Why the model is not exactly a stock LlamaForCausalLM, or "" when it is.
std::string not_llama(const ModelConfig& c);

// Llama's names; att_proj splits into q/k/v, ff_proj's halves are (value, gate) = (up, gate).
NamedTensors llama_tensors(const ModelConfig& c, const NamedTensors& ours);

// Our parameters from Llama's tensors; a key that has no place here is an Error naming it.
NamedTensors ours_from_llama(const ModelConfig& c, TensorMap hf, const std::string& where);

// The config.json keys every exported model has (sizes, vocabulary, special tokens).
nlohmann::ordered_json common_hf_config(const ModelConfig& c);

// config.json of a stock LlamaForCausalLM for `c` (not_llama(c) must be "").
nlohmann::ordered_json llama_config(const ModelConfig& c);

// The run config of a stock Llama folder's config.json: Pre-Norm, RMSNorm, SwiGLU, RoPE, no
// biases; anything else is an Error naming the config key.
TrainConfig config_from_llama(const nlohmann::json& j, const std::filesystem::path& dir);

}  // namespace siamese::hf
