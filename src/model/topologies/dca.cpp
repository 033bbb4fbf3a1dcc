// DeepCrossAttention (Heddes et al. 2025, "DeepCrossAttention: Supercharging Transformer Residual
// Connections", arXiv 2502.06785), as the PyPI package deep-cross-attention 0.1.1 (DCAGPT,
// DCABlock, GRN) computes it. A block's queries, keys and values each read their own learned,
// input-dependent mix of earlier block outputs, which generalises value-residual learning (the
// values may come from other layers than the queries). With y_0 the embeddings and y_j the
// output of block j-1, block l reads the sources Y_l = (y_0 .. y_l), cut to their first k and
// last k when there are more than 2k (k = model.dca_past_layers), through
//   GRN_o(Y) = sum_i y_i * (relu(w_o . N(y_i)) + b_{o,i})   w_o in R^d, b_{o,i} in R^d
//   q, k, v = GRN_{0,1,2}(Y_l)                               (block l's N, w, b)
//   a = Attn(N_q(q), N_k(k), N_v(v))                         (separate Q, K, V inputs)
//   m = MLP(N_ff(a + q))
//   y_{l+1} = a + m
// and the head reads LN_f(GRN(Y_L)) with one output and its own N, w, b. The package's init:
// w ~ N(0, 1e-2^2), b = 1.
// y_{l+1} carries no residual: earlier outputs reach a block only through the GRNs, whose b = 1
// makes a fresh model sum its sources like a residual stream, as long as every output is one.
//
// The state's streams are the sources "y0", "y1", ..: the middle ones are dropped as soon as
// no later block reads them, so the state holds 2k tensors at most. Within a block, the MLP's
// input a + q travels in State::carry. Sources are kept in the parameters' dtype and mixed with
// the autocast paused, as attnres does. With ForwardOptions::n_blocks short of the last block,
// the head has fewer sources than biases: the first ones take the first biases, the last ones
// the last.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "siamese/common/autocast.h"
#include "siamese/model/topology.h"

namespace siamese::model {
namespace {

// Sources of a GRN placed after `blocks` blocks: the embeddings and each block's output, the
// first k and last k of them.
// k above the sources there can be means every source; 2 * k would overflow for k near 2^63.
int64_t source_count(int64_t blocks, int64_t k) {
  return k > blocks ? blocks + 1 : std::min(blocks + 1, 2 * k);
}

struct Grn {
  Norm norm{nullptr};
  torch::Tensor weight;  // [outputs, d]
  torch::Tensor bias;    // [outputs, sources, d]
};

class DeepCrossAttention : public TopologyImpl {
 public:
  explicit DeepCrossAttention(const config::ModelConfig& cfg) : TopologyImpl(cfg), k_(cfg.dca_past_layers) {
    TORCH_CHECK(k_ >= 1, "model.dca_past_layers must be positive, got ", k_);
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      grn_.push_back({block_norm(l, "grn_norm"),
                      block_param(l, "grn_weight", 1e-2 * torch::randn({3, cfg.d_model})),
                      block_param(l, "grn_bias", torch::ones({3, source_count(l, k_), cfg.d_model}))});
      input_norm_.push_back(
          {block_norm(l, "q_input_norm"), block_norm(l, "k_input_norm"), block_norm(l, "v_input_norm")});
      ff_norm_.push_back(block_norm(l, "ff_norm"));
    }
    final_ = {
        top_norm("grn_norm_f"), register_parameter("grn_weight_f", 1e-2 * torch::randn({1, cfg.d_model})),
        register_parameter("grn_bias_f", torch::ones({1, source_count(cfg.n_layers, k_), cfg.d_model}))};
    ln_f_ = top_norm("ln_f");
  }

  SublayerHooks sublayer_hooks(int64_t) override {
    SublayerHooks h;
    h.separate_qkv = true;
    return h;
  }

  State begin(torch::Tensor emb) override { return {{"y0"}, {emb.to(final_.weight.scalar_type())}}; }

  torch::Tensor enter(State& st, int64_t s) override {
    const int64_t l = layer_of(s);
    if (!is_attention(s)) return ff_norm_[l](st.carry);
    auto qkv = combine(st.streams, grn_[l]);
    st.carry = qkv[0];
    auto& n = input_norm_[l];
    return torch::stack({n[0](qkv[0]), n[1](qkv[1]), n[2](qkv[2])});
  }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    auto v = f.to(final_.weight.scalar_type());
    if (is_attention(s)) {
      st.carry = st.carry + v;
      st.names.push_back("y" + std::to_string(layer_of(s) + 1));
      st.streams.push_back(v);
      return;
    }
    st.carry = torch::Tensor();
    st.streams.back() = st.streams.back() + v;
    if (int64_t(st.streams.size()) - k_ > k_) {  // more than 2k sources, without overflowing 2k
      st.names.erase(st.names.begin() + k_);
      st.streams.erase(st.streams.begin() + k_);
    }
  }

  torch::Tensor finish(State& st) override { return ln_f_(combine(st.streams, final_)[0]); }

 private:
  // [outputs, B, T, d]: GRN_o over `sources`.
  torch::Tensor combine(const std::vector<torch::Tensor>& sources, Grn& g) const {
    AutocastPause full_precision(g.weight.device().type());
    const auto y = torch::stack(sources);  // [n, B, T, d]
    auto bias = g.bias;
    const int64_t n = y.size(0), first = std::min(n, k_);
    if (n < bias.size(1))
      bias = torch::cat({bias.narrow(1, 0, first), bias.narrow(1, bias.size(1) - (n - first), n - first)}, 1);
    const auto a = torch::relu(torch::matmul(g.norm(y), g.weight.t()));  // [n, B, T, outputs]
    return torch::einsum("nbto,nbtd->obtd", {a, y}) + torch::einsum("ond,nbtd->obtd", {bias, y});
  }

  int64_t k_;
  std::vector<Norm> ff_norm_;
  std::vector<Grn> grn_;
  std::vector<std::array<Norm, 3>> input_norm_;
  Grn final_;
  Norm ln_f_{nullptr};
};

}  // namespace

std::shared_ptr<TopologyImpl> make_dca(const config::ModelConfig& cfg) {
  return std::make_shared<DeepCrossAttention>(cfg);
}

}  // namespace siamese::model
