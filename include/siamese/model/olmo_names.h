#pragma once
// Our parameter names, parsed in one place, and OLMo state_dict keys <-> our names. This is
// how OLMo checkpoints (and the golden tensors) come in and how checkpoints go out under
// OLMo's names; optimizer groups, analyses and the Hugging Face mapping read our names
// through parse_param_name.
//
//   OLMo key                                          ours
//   transformer.wte.weight                            wte.weight
//   transformer.wpe.weight                            wpe.weight
//   transformer.emb_norm.{weight,bias}                emb_norm.{weight,bias}
//   transformer.blocks.{i}.att_proj.{weight,bias}     blocks.{i}.attn.att_proj.*
//   transformer.blocks.{i}.attn_out.*                 blocks.{i}.attn.attn_out.*
//   transformer.blocks.{i}.{q,k,v}_norm.*             blocks.{i}.attn.{q,k,v}_norm.*
//   transformer.blocks.{i}.ff_proj.*                  blocks.{i}.mlp.ff_proj.*
//   transformer.blocks.{i}.ff_out.*                   blocks.{i}.mlp.ff_out.*
//   transformer.ff_out.*                              ff_out.*
//   transformer.<anything else>                       topology.<anything else>
// The last row carries every residual-path norm and vector under the name the topology
// gives it, which is OLMo's: blocks.{i}.attn_norm, blocks.{i}.ff_norm, ln_f, and for
// hybrid_pre blocks.{i}.c1, attn_y_norm, ff_y_norm, ff_input_norm, ln_y_f, ln_final_f.
// A leading "model." (HuggingFace-wrapped OLMo checkpoints) is accepted and dropped.
#include <torch/torch.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "siamese/model/transformer.h"

namespace siamese::model {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// One of our parameter names taken apart:
//   wte.weight, wpe.weight, emb_norm.*      owner Embedding, local = the name
//   blocks.{l}.attn.<local>                 owner Attention, layer l
//   blocks.{l}.mlp.<local>                  owner Mlp, layer l
//   topology.blocks.{l}.<local>             owner Topology, layer l (residual-path norms, c1)
//   topology.<local>                        owner Topology (ln_f, ...)
//   ff_out.*                                owner Head, local = the name
struct ParamName {
  enum class Owner { Embedding, Attention, Mlp, Topology, Head };
  Owner owner;
  std::optional<int64_t> layer;
  std::string local;
};
// Throws siamese::Error for a name outside that scheme.
ParamName parse_param_name(const std::string& name);

// Throws siamese::Error for a key outside OLMo's "transformer." namespace.
std::string from_olmo_key(const std::string& key);
std::string to_olmo_key(const std::string& name);

// Copies `state` (OLMo keys) into the model's parameters. Every parameter must be given
// exactly once with its shape, and every key must name a parameter; otherwise a
// siamese::Error lists the missing / unexpected / mismatched keys (`where` = source).
void load_olmo_state(TransformerImpl& model, const NamedTensors& state, const std::string& where);

// The model's parameters under OLMo keys, in named_parameters() order.
NamedTensors olmo_state(TransformerImpl& model);

}  // namespace siamese::model
