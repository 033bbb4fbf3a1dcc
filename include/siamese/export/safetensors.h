#pragma once
// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON
// header of name -> dtype / shape / data_offsets, then the raw tensors. Read and written
// here without Python; a sharded model is several files plus model.safetensors.index.json.
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <string>

#include "siamese/model/olmo_names.h"

namespace siamese::hf {

using model::NamedTensors;
using TensorMap = std::map<std::string, torch::Tensor>;

// One file, written whole or not at all (common/durable_file.h). F32, BF16 and F16 only.
void write_safetensors(const std::filesystem::path& path, const NamedTensors& tensors);

// Every tensor of one file as a CPU tensor. The header is checked against the file before
// anything is allocated (its length, each tensor's dtype, shape and offsets within the
// file), so a damaged or truncated file is an Error naming it and the tensor, never a huge
// allocation or a raw library message.
TensorMap read_safetensors(const std::filesystem::path& path);

// model.safetensors, or shards of at most `max_shard_bytes` each (model-0000i-of-0000n)
// plus the index transformers reads.
void write_weights(const std::filesystem::path& folder, const NamedTensors& tensors, int64_t max_shard_bytes);

// The tensors of a folder written either way; the index must name every file it maps to.
TensorMap read_weights(const std::filesystem::path& folder);

}  // namespace siamese::hf
