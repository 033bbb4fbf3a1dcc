#pragma once
// The OLMo-style decoder: token embedding -> 2 * n_layers sublayers threaded through a
// residual Topology (topology.h) -> LM head. The loop is the same for every topology.
//
// Parameter names (named_parameters()), from which olmo_names.h maps to OLMo's keys:
//   wte.weight                       token embedding [embedding_size, d]
//   wpe.weight                       learned positions (only when rope is off)
//   emb_norm.*                       OLMo's embedding_layer_norm
//   blocks.{i}.attn.{att_proj,attn_out,q_norm,k_norm,v_norm}.{weight,bias}
//   blocks.{i}.mlp.{ff_proj,ff_out}.{weight,bias}
//   blocks.{i}.mlp.router.weight, blocks.{i}.mlp.experts.{ff_proj,ff_out}   (block_type moe)
//   topology.<OLMo name>             residual-path norms and vectors, e.g.
//                                    topology.blocks.{i}.attn_norm.weight, topology.ln_f.weight
//   ff_out.{weight,bias}             LM head (absent with weight_tying)
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>

#include "siamese/config/config.h"
#include "siamese/model/attention.h"
#include "siamese/model/block_runner.h"
#include "siamese/model/mlp.h"
#include "siamese/model/parametrization.h"
#include "siamese/model/topology.h"

namespace siamese::model {

// Receives every named stream of the residual State: after the embeddings (layer -1),
// after each block (layer 0..n-1), and the head's input (layer n, stream "final").
using Probe = std::function<void(int64_t layer, const std::string& stream, const torch::Tensor&)>;

// Every block's LayerCache (attention.h): with one, hidden() reads only the positions after
// those already cached. Topologies act on each position alone, so the residual streams need
// no cache; attention is the only place that reads earlier positions.
struct KvCache {
  KvCache(int64_t n_layers, int64_t capacity) : layers(n_layers, LayerCache{capacity, {}, {}, 0, {}}) {}
  int64_t length() const { return layers.empty() ? 0 : layers.front().length; }
  // Marks padding keys in every layer (LayerCache::keys_valid), before the first read.
  void set_keys_valid(const torch::Tensor& valid) {
    for (auto& l : layers) l.keys_valid = valid;
  }
  // Keeps batch rows `rows` (an int64 index, repeats allowed): one cached prefix continued
  // several ways.
  void select_rows(const torch::Tensor& rows) {
    for (auto& l : layers) {
      l.k = l.k.index_select(0, rows);
      l.v = l.v.index_select(0, rows);
      if (l.keys_valid.defined()) l.keys_valid = l.keys_valid.index_select(0, rows);
    }
  }
  std::vector<LayerCache> layers;
};

struct ForwardOptions {
  const Probe* probe = nullptr;
  KvCache* cache = nullptr;  // generation: input_ids continue the cached positions
  // Receives each sublayer's input and output: (layer, "attn_in" | "attn_out" | "ffn_in" |
  // "ffn_out", tensor); the output before residual dropout.
  const Probe* sublayer_probe = nullptr;
  // Receives the weights each sublayer's enter mixed the streams with (State::mixing), as
  // (layer, "attn.<name>" | "ffn.<name>", tensor), and the head's as (n_layers, "final.<name>").
  const Probe* mixing_probe = nullptr;
  std::optional<int64_t> n_blocks;  // run only the first n blocks, then finish (effective depth)
  // Packed training rows (documents.h): each attention sublayer reads only within documents.
  const Documents* documents = nullptr;
  // Auxiliary losses (MoE): their gradient scale in, the blocks' values out (aux_loss.h).
  AuxLosses* aux = nullptr;
};

class BlockImpl : public torch::nn::Module {
 public:
  // Block `layer`; `window`: its attention's sliding window (attention_window), nullopt for
  // full attention.
  BlockImpl(const config::ModelConfig& cfg, const SublayerHooks& hooks, int64_t layer,
            std::optional<int64_t> window);
  Attention attn{nullptr};
  FeedForward mlp;  // dense or sparse (mlp.h)
};
TORCH_MODULE(Block);

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const config::ModelConfig& cfg);

  // input_ids [B, T] int64 -> logits [B, T, embedding_size] in the parameters' dtype, or in
  // autocast's half type under autocast (the head is a matmul).
  torch::Tensor forward(const torch::Tensor& input_ids);
  torch::Tensor forward(const torch::Tensor& input_ids, const ForwardOptions& opts);

  // The head's input [B, T, d] (forward = head(hidden)); lets a caller compute the loss
  // in chunks instead of materializing every logit at once.
  torch::Tensor hidden(const torch::Tensor& input_ids, const ForwardOptions& opts = {});
  // LM head: hidden [.., d] -> logits [.., embedding_size] (tied to wte when weight_tying;
  // divided by sqrt(d) when scale_logits; then the topology's scale_logits).
  torch::Tensor head(const torch::Tensor& hidden);

  // Redraws the embeddings, the blocks' projections and the LM head by OLMo's rules for
  // init_fn normal / mitchell / full_megatron (listed in the .cpp), zeroes their biases, then
  // applies the topology's init_gain, then its project_weights. Norms and topology-owned
  // vectors (c1, hyper-connection weights) are not touched: they have no random
  // initialisation and are built at their start values (norm weights 1, biases 0). Uses
  // torch's global generator: seed with torch::manual_seed first for a reproducible model.
  void reset_parameters();

  // Use reference_attention instead of the library kernel in every block (tests).
  void use_reference_attention(bool on);
  // Every block's attention takes its one-pass head preparation on the CPU too (tests).
  void use_fused_heads_on_cpu(bool on);

  const config::ModelConfig& config() const { return cfg_; }
  // model.parametrization's multipliers for this shape (parametrization.h).
  const Parametrization& shape() const { return shape_; }
  // Installs what runs every block (nullptr: direct_blocks()); not owned.
  void set_block_runner(BlockRunner* runner) { block_runner_ = runner ? runner : &direct_blocks(); }
  TopologyImpl& topology() { return *topology_; }

  torch::nn::Embedding wte{nullptr};
  torch::nn::Embedding wpe{nullptr};
  Norm emb_norm{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::Linear ff_out{nullptr};

 private:
  // Block `layer` on the residual state, recomputed in backward where activation
  // checkpointing says so.
  void forward_block(State& st, int64_t layer, const ForwardOptions& opts);
  // Block `layer`'s two sublayers on the residual state (enter, F, dropout, leave).
  void run_block(State& st, int64_t layer, const Probe* sublayer_probe, const Probe* mixing_probe,
                 LayerCache* cache, const Documents* documents, AuxLosses* aux);

  config::ModelConfig cfg_;
  Parametrization shape_;
  std::shared_ptr<TopologyImpl> topology_;
  std::vector<Block> block_list_;
  BlockRunner* block_runner_ = &direct_blocks();
};
TORCH_MODULE(Transformer);

}  // namespace siamese::model
