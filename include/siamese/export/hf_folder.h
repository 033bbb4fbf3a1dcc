#pragma once
// A model as a Hugging Face folder and back: config.json, model.safetensors (sharded with an
// index above a size), generation_config.json and, for tokenizer-based runs, the tokenizer
// files. A model a stock transformers class computes is written as that class (hf_stock.h:
// LlamaForCausalLM, Olmo2ForCausalLM, Olmo3ForCausalLM, OlmoeForCausalLM; same maths); every other model
// keeps the C++ parameter names and ships modeling_siamese.py (python/, compiled into the binary), which
// transformers loads with trust_remote_code=True. config.json carries the whole run config, so import
// restores it.
#include <filesystem>
#include <string>

#include "siamese/config/config.h"
#include "siamese/model/transformer.h"

namespace siamese::hf {

struct ExportOptions {
  int64_t max_shard_bytes = int64_t(5) << 30;  // split model.safetensors above this
  std::string tokenizer;                       // its tokenizer.json; "" for a byte-level model
};

// Writes the folder `out`. Everything is written into a scratch folder beside it, then
// swapped in whole: a kill or a full disk leaves the earlier export (or nothing) at `out`,
// never a mix of two models or stale shards. `out` may be missing, empty, or an earlier
// export (it has a config.json); any other folder is refused, untouched. Returns the
// architecture written: the stock class, or "SiameseForCausalLM (why no stock class fits)".
std::string export_model(const config::TrainConfig& config, model::TransformerImpl& model,
                         const std::filesystem::path& out, const ExportOptions& options);

struct ImportedModel {
  config::TrainConfig config;
  model::Transformer model{nullptr};
};

// Reads a folder `siamese export` wrote (bit-exact: its config.json carries the run config)
// or a stock folder of a class hf_stock.h lists. Anything the project cannot represent is an Error
// naming the config key or tensor, by the folder's own names for a stock folder. A stock
// folder whose config.json keys disagree with the run config carried in it is refused,
// naming each key with both values.
ImportedModel import_model(const std::filesystem::path& folder);

}  // namespace siamese::hf
