#pragma once
// The correspondence between siamese models and the stock Hugging Face classes that compute
// the same maths, in both directions (export writes it, import reads it):
//   pre       (RMSNorm, SwiGLU, RoPE, no biases)                      <-> LlamaForCausalLM
//   reordered (the same, full-width Q/K RMSNorms with weights: OLMo-2) <-> Olmo2ForCausalLM
//   reordered with sliding-window layers of one window (OLMo-3)        <-> Olmo3ForCausalLM
//   pre with full-width Q/K RMSNorms and block_type moe (dropless, no
//   shared expert: OLMoE)                                              <-> OlmoeForCausalLM
// att_proj's rows are [q | k | v]; ff_proj's first half is SwiGLU's value (up_proj), its
// second the gate (gate_proj), for the dense MLP and for each expert alike. OLMoE's experts
// are one matrix per expert (mlp.experts.{e}.gate_proj.weight: the hub's layout, the one
// transformers writes, fused on load); the router is mlp.gate.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/export/safetensors.h"

namespace siamese::hf {

struct StockClass {
  std::string architecture;  // config.json "architectures": LlamaForCausalLM
  std::string model_type;    // config.json "model_type": llama
  std::string topology;      // model.residual it computes
  // The HF names (under model.layers.{l}.) of the topology's attn_norm and ff_norm.
  std::string attn_norm, ff_norm;
  bool qk_norm;  // self_attn.q_norm / k_norm over the full projection width
  bool moe;      // the MLP is OLMoE's sparse block (mlp.gate router, mlp.experts)
  // Sliding-window layers (config.json sliding_window and layer_types), one window size.
  bool windows;
};

// The stock class that computes `c`, or nullptr with the reason in `why_not`.
const StockClass* stock_class_of(const config::ModelConfig& c, std::string* why_not);

// The stock class of a config.json model_type ("llama", "olmo2", "olmo3", "olmoe"), or nullptr.
const StockClass* stock_class_named(const std::string& model_type);

// "LlamaForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM or OlmoeForCausalLM": the classes
// import reads, for help texts and messages.
std::string stock_class_list();

// The stock class's tensor names for our parameters.
NamedTensors stock_tensors(const StockClass& cls, const config::ModelConfig& c, const NamedTensors& ours);

// Our parameters from the stock class's tensors; a key that has no place here is an Error naming it.
NamedTensors ours_from_stock(const StockClass& cls, const config::ModelConfig& c, TensorMap hf,
                             const std::string& where);

// Refuses, naming the folder's tensor, its shape and the one config.json implies, a tensor of
// `hf` whose shape differs from the one its stock name has in a model of `c` (`ours` are that
// model's parameters): checked before ours_from_stock fuses tensors, so no message names our
// fused parameters.
void check_stock_shapes(const StockClass& cls, const config::ModelConfig& c, const NamedTensors& ours,
                        const TensorMap& hf, const std::string& where);

// `text` (a message about a model built from a stock config.json) with our model.* keys
// written as the config.json keys they come from: model.moe_top_k -> num_experts_per_tok.
std::string in_stock_keys(std::string text);

// The config.json keys on which a stock folder and the run config `siamese export` carried in it
// (siamese_run_config) disagree, each "key V (config.json) vs W (siamese_run_config)": an edit
// of config.json that transformers computes with but the carried config does not say.
std::vector<std::string> stock_disagreements(const StockClass& cls, const nlohmann::json& j,
                                             const std::filesystem::path& dir,
                                             const config::ModelConfig& carried);

// The config.json keys every exported model has (sizes, vocabulary, special tokens).
nlohmann::ordered_json common_hf_config(const config::ModelConfig& c);

// config.json of the stock class for `c` (stock_class_of(c) must be &cls).
nlohmann::ordered_json stock_config(const StockClass& cls, const config::ModelConfig& c);

// The run config of a stock folder's config.json (RMSNorm, SwiGLU, RoPE, no biases, the
// class's topology); anything else is an Error naming the config key.
config::TrainConfig config_from_stock(const StockClass& cls, const nlohmann::json& j,
                                      const std::filesystem::path& dir);

}  // namespace siamese::hf
