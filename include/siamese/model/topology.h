#pragma once
// The residual-topology seam (docs/architecture.md). A block has two sublayers,
// attention and MLP, numbered s = 2*layer + {0 attn, 1 mlp}. Attention and MLP know
// nothing about residuals; a Topology owns the residual state (one or more named
// streams) and every norm on the residual path. The transformer loop is the same for
// every topology:
//
//     State st = topo->begin(embeddings);
//     for (s = 0; s < 2 * n_layers; ++s) topo->leave(st, dropout(F_s(topo->enter(st, s))), s);
//     logits = head(topo->finish(st));
//
// Writing a topology (one file in src/model/topologies/, one row in topology_table.h; docs/architecture.md
// lists the rest):
//   * derive from TopologyImpl, build norms with add_sublayer_norms (one per sublayer),
//     block_norm(layer, "name") / top_norm("name") and vectors with block_param(layer,
//     "name", init): they then carry OLMo's state_dict names (transformer.blocks.{i}.name /
//     transformer.name), see olmo_names.h;
//   * implement begin / enter / leave / finish; enter may update the state (a lazy
//     post-norm) before returning F's input; leave folds F's output back;
//   * name the streams in State (analysis reads them through the probe hook: "x", "y", ...)
//     and list them in its row; anything enter computes for leave goes in State::carry;
//   * override init_gain() if the topology needs it; settings it needs from the rest of
//     the model (HybridNorm's Q/K/V norms) are its row's required settings;
//   * a topology that also changes what happens inside the sublayers and the head, or
//     constrains the weights (nGPT), overrides sublayer_hooks, scale_logits and
//     project_weights; their defaults leave the model as it is.
#include <torch/torch.h>

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/model/norm.h"
#include "siamese/model/sublayer_hooks.h"

namespace siamese::model {

// The residual state between sublayers: one tensor per named stream, each [B, T, d] (or any
// shape the topology chooses, e.g. [n, B, T, d] for hyper-connections).
struct State {
  std::vector<std::string> names;
  std::vector<torch::Tensor> streams;

  // Norms of streams computed ahead, by the same kernel that produced the streams (the
  // SiameseNorm fused update): `value` is the module `norm` applied to the stream tensor
  // `of`. A topology uses one only while its stream is still `of`. The streams themselves
  // keep their meaning: probes never see these.
  struct Normalized {
    const torch::nn::Module* norm;
    torch::Tensor of, value;
  };
  std::vector<Normalized> normalized = {};

  // What a sublayer's enter hands to its leave (hyper-connections' B(H)); topologies keep
  // no state of their own between the two.
  torch::Tensor carry = {};

  // The weights the last enter (or finish) mixed the streams with, by name (mHC's "pre",
  // "post", "comb"; AttnRes's "attnres"), each [B, T, ..]; empty for topologies with fixed
  // mixing. The transformer hands them to ForwardOptions::mixing_probe, then clears them.
  std::vector<std::pair<std::string, torch::Tensor>> mixing = {};

  torch::Tensor& operator[](size_t i) { return streams[i]; }
  const torch::Tensor& operator[](size_t i) const { return streams[i]; }
};

// One norm per sublayer, indexed by the sublayer s (2 * layer + {0 attention, 1 MLP}).
class SublayerNorms {
 public:
  Norm& operator[](int64_t s) { return norms_[s]; }
  bool empty() const { return norms_.empty(); }

 private:
  friend class TopologyImpl;
  std::vector<Norm> norms_;
};

// The weight matrices of a block, for topologies that change their initialization.
enum class Projection { Query, Key, Value, AttnOut, FfProj, FfOut };

class TransformerImpl;

class TopologyImpl : public torch::nn::Module {
 public:
  explicit TopologyImpl(const config::ModelConfig& cfg);

  // Residual state from the (dropped-out) token embeddings [B, T, d].
  virtual State begin(torch::Tensor embeddings) = 0;
  // Input of sublayer s (its F); may transform the state first.
  virtual torch::Tensor enter(State& state, int64_t s) = 0;
  // Folds F_s's output (after residual dropout) back into the streams.
  virtual void leave(State& state, torch::Tensor f_out, int64_t s) = 0;
  // The [B, T, d] representation fed to the LM head.
  virtual torch::Tensor finish(State& state) = 0;

  // Factor applied to a projection's weight after the config's init (DeepNorm's beta).
  virtual double init_gain(Projection p, int64_t layer) const { return 1.0; }

  // What block `layer`'s attention and MLP do differently; asked once, when they are built.
  virtual SublayerHooks sublayer_hooks(int64_t layer) { return {}; }
  // The LM head's logits [.., embedding_size], rescaled.
  virtual torch::Tensor scale_logits(const torch::Tensor& logits) { return logits; }
  // Puts the model's weights back where the topology confines them: called after the
  // initialization and after every optimizer step (the trainer's), skipped or not.
  virtual void project_weights(TransformerImpl& model) {}

  static int64_t layer_of(int64_t s) { return s / 2; }
  static bool is_attention(int64_t s) { return s % 2 == 0; }

 protected:
  // Fills each `norms` with a make_norm(cfg, d_model) per sublayer, registered as
  // blocks.{layer}.{attn} and blocks.{layer}.{ff}; per layer, every attention norm first.
  struct SublayerNormNames {
    SublayerNorms* norms;
    std::string attn, ff;
  };
  void add_sublayer_norms(std::initializer_list<SublayerNormNames> names);
  // A make_norm(cfg, d_model) registered as blocks.{layer}.{name}.
  Norm block_norm(int64_t layer, const std::string& name);
  // Any module registered as blocks.{layer}.{name} (e.g. a parameter-free norm).
  template <typename M>
  M block_module(int64_t layer, const std::string& name, M module) {
    return blocks_[layer]->register_module(name, module);
  }
  // A learnable tensor registered as blocks.{layer}.{name}.
  torch::Tensor block_param(int64_t layer, const std::string& name, torch::Tensor init);
  // A make_norm(cfg, d_model) registered as {name} (OLMo's transformer.{name}).
  Norm top_norm(const std::string& name);

  config::ModelConfig cfg_;

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> blocks_;  // holders, children of "blocks"
};

}  // namespace siamese::model
