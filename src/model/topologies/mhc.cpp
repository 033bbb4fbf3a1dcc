// mHC: manifold-constrained Hyper-Connections (Xie et al. 2025, arXiv 2512.24880; DeepSeek-V4),
// as transformers' DeepseekV4HyperConnection computes it (manifold_streams.h has the update).
// The mixing matrix comes from its n*n logits by Sinkhorn-Knopp as that code runs it:
//   M = softmax_row(logits) + eps;  M = M / (colsum + eps);
//   model.mhc_sinkhorn_iters - 1 times: M = M / (rowsum + eps); M = M / (colsum + eps)
// With eps = 0 this is the paper's exp(logits) normalised alternately by rows and columns
// mhc_sinkhorn_iters times (softmax is exp followed by the first row normalisation).
#include "manifold_streams.h"

namespace siamese::model {
namespace {

class Mhc : public ManifoldStreams {
 public:
  explicit Mhc(const config::ModelConfig& cfg) : ManifoldStreams(cfg, cfg.hc_rate * cfg.hc_rate) {}

 protected:
  torch::Tensor mixing(const torch::Tensor& logits) override {
    std::vector<int64_t> shape = logits.sizes().vec();
    shape.back() = n_;
    shape.push_back(n_);
    const double eps = cfg_.mhc_eps;
    auto m = torch::softmax(logits.view(shape), -1) + eps;
    m = m / (m.sum(-2, true) + eps);
    for (int64_t i = 1; i < cfg_.mhc_sinkhorn_iters; ++i) {
      m = m / (m.sum(-1, true) + eps);
      m = m / (m.sum(-2, true) + eps);
    }
    return m;
  }
};

}  // namespace

std::shared_ptr<TopologyImpl> make_mhc(const config::ModelConfig& cfg) { return std::make_shared<Mhc>(cfg); }

}  // namespace siamese::model
