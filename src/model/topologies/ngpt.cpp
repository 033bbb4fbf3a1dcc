// nGPT, the normalized transformer (Loshchilov et al. 2024, "nGPT: Normalized Transformer with
// Representation Learning on the Hypersphere", arXiv 2410.01131; OLMo-core's `normalized`
// block, NormalizedAttention, NormalizedFeedForward and NormalizedLMHead). The hidden state
// and every weight row along d_model live on the unit sphere, and each sublayer moves the
// state a learned step towards its normalized output:
//   x = Norm(x + alpha_s (Norm(F_s(x)) - x)),  Norm(v) = v / ||v||,  out = x,
// alpha_s (the eigen learning rates, blocks.{l}.attn_alpha / ff_alpha) per channel. Inside
// the sublayers (sublayer_hooks): q = Norm(q) s_q, k = Norm(k) s_k before RoPE, scores
// q.k sqrt(head_dim); SwiGLU silu(s_v sqrt(d) v) * (s_u u). The head's logits are s_z W x.
// After initialization and after every optimizer step (project_weights) the embedding rows,
// the head's rows, the rows of att_proj and ff_proj and the columns of attn_out and ff_out
// are scaled back to unit norm.
//
// Every learned scale is stored as the paper prescribes (its sections 2.6 and 2.3.2), divided
// by a factor that makes Adam move it at a useful speed, and multiplied back in the forward:
//   alpha = |stored| 0.05 sqrt(d)  (stored 1/sqrt(d), so 0.05 at init),
//   s_q, s_k, s_z = stored sqrt(d)  (stored 1/sqrt(d), so 1 at init),  s_u, s_v = stored (1).
// As in OLMo-core (and unlike the paper, which normalizes per head with one shared s_qk), q
// and k are normalized over the full projection width and scaled separately: this is the
// reference the parity test checks. No final norm: the state is already on the sphere.
#include <cmath>

#include "siamese/common/error.h"
#include "siamese/model/topology.h"
#include "siamese/model/transformer.h"

namespace siamese::model {
namespace {

torch::Tensor l2_normalize(const torch::Tensor& x, int64_t dim = -1) {
  const auto norm = torch::linalg_vector_norm(x, 2, dim, /*keepdim=*/true,
                                              at::promote_types(x.scalar_type(), torch::kFloat));
  return x / norm.to(x.scalar_type());
}

void normalize_in_place(const torch::Tensor& w, int64_t dim) { w.copy_(l2_normalize(w, dim)); }

class NormalizedTransformer : public TopologyImpl {
 public:
  explicit NormalizedTransformer(const config::ModelConfig& cfg)
      : TopologyImpl(cfg), sqrt_d_(std::sqrt(double(cfg.d_model))) {
    if (cfg.activation_type != config::Activation::SwiGLU)
      throw Error("ngpt scales the two halves of a SwiGLU MLP, but model.activation_type is " +
                      name_of(cfg.activation_type),
                  "model.activation_type", "set model.activation_type: swiglu");
    const int64_t d = cfg.d_model, kv = kv_head_count(cfg) * (d / cfg.n_heads);
    const int64_t inner = mlp_inner_size(cfg);
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      Layer p;
      p.attn_alpha = block_param(l, "attn_alpha", torch::full({d}, 1.0 / sqrt_d_));
      p.ff_alpha = block_param(l, "ff_alpha", torch::full({d}, 1.0 / sqrt_d_));
      p.sq = block_param(l, "sq", torch::full({d}, 1.0 / sqrt_d_));
      p.sk = block_param(l, "sk", torch::full({kv}, 1.0 / sqrt_d_));
      p.su = block_param(l, "su", torch::ones({inner}));
      p.sv = block_param(l, "sv", torch::ones({inner}));
      layers_.push_back(p);
    }
    sz_ = register_parameter("sz", torch::full({cfg.embedding_size}, 1.0 / sqrt_d_));
  }

  State begin(torch::Tensor emb) override { return {{"x"}, {emb}}; }

  torch::Tensor enter(State& st, int64_t s) override { return st[0]; }

  void leave(State& st, torch::Tensor f, int64_t s) override {
    const auto& p = layers_[layer_of(s)];
    const auto alpha = ((is_attention(s) ? p.attn_alpha : p.ff_alpha) * (0.05 * sqrt_d_)).abs();
    st[0] = l2_normalize(st[0] + alpha * (l2_normalize(f) - st[0]));
  }

  torch::Tensor finish(State& st) override { return st[0]; }

  SublayerHooks sublayer_hooks(int64_t layer) override {
    const Layer p = layers_[layer];
    const double sqrt_d = sqrt_d_;
    SublayerHooks h;
    h.qk = [p, sqrt_d](const torch::Tensor& q, const torch::Tensor& k) {
      return SublayerHooks::Pair{(l2_normalize(q) * (p.sq * sqrt_d)).to(q.scalar_type()),
                                 (l2_normalize(k) * (p.sk * sqrt_d)).to(k.scalar_type())};
    };
    h.softmax_scale = std::sqrt(double(cfg_.d_model / cfg_.n_heads));
    h.swiglu = [p, sqrt_d](const torch::Tensor& value, const torch::Tensor& gate) {
      return SublayerHooks::Pair{(value * p.su).to(value.scalar_type()),
                                 (gate * (p.sv * sqrt_d)).to(gate.scalar_type())};
    };
    return h;
  }

  torch::Tensor scale_logits(const torch::Tensor& logits) override {
    return logits * (sz_ * sqrt_d_).to(logits.scalar_type());
  }

  void project_weights(TransformerImpl& model) override {
    torch::NoGradGuard guard;
    normalize_in_place(model.wte->weight, -1);
    if (model.ff_out) normalize_in_place(model.ff_out->weight, -1);
    for (const auto& b : *model.blocks) {
      const auto& block = b->as<BlockImpl>();
      normalize_in_place(block->attn->att_proj->weight, -1);
      normalize_in_place(block->attn->attn_out->weight, 0);
      // Every feed-forward matrix, an expert's as the dense MLP's, along d_model.
      for (const auto& m : block->mlp->matrices())
        if (m.role != FfnRole::Router) normalize_in_place(m.weight, m.role == FfnRole::Input ? -1 : -2);
    }
  }

 private:
  struct Layer {
    torch::Tensor attn_alpha, ff_alpha, sq, sk, su, sv;
  };

  double sqrt_d_;
  std::vector<Layer> layers_;
  torch::Tensor sz_;
};

}  // namespace

std::shared_ptr<TopologyImpl> make_ngpt(const config::ModelConfig& cfg) {
  return std::make_shared<NormalizedTransformer>(cfg);
}

}  // namespace siamese::model
