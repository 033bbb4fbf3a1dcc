// mHC-lite (arXiv 2601.05732): mHC (manifold_streams.h) with the mixing matrix built as a
// convex combination of the n! permutation matrices P_k, weights softmax(logits) over them:
//   comb = sum_k softmax(logits)_k P_k
// which is doubly stochastic exactly (Birkhoff-von Neumann), with no Sinkhorn iterations.
// The projection gives n! mixing logits, so n = model.hc_rate is kept small.
#include <algorithm>
#include <numeric>

#include "manifold_streams.h"
#include "siamese/common/error.h"

namespace siamese::model {
namespace {

constexpr int64_t kMaxStreams = 6;  // 720 permutations

int64_t factorial(int64_t n) { return n <= 1 ? 1 : n * factorial(n - 1); }

class MhcLite : public ManifoldStreams {
 public:
  explicit MhcLite(const config::ModelConfig& cfg) : ManifoldStreams(cfg, factorial(cfg.hc_rate)) {
    // Row k of perms_ is P_k flattened, in lexicographic order of the permutation.
    std::vector<int64_t> p(n_);
    std::iota(p.begin(), p.end(), 0);
    perms_ = torch::zeros({m_, n_ * n_});
    int64_t k = 0;
    do {
      for (int64_t i = 0; i < n_; ++i) perms_[k][i * n_ + p[i]] = 1.0;
      ++k;
    } while (std::next_permutation(p.begin(), p.end()));
  }

 protected:
  torch::Tensor mixing(const torch::Tensor& logits) override {
    std::vector<int64_t> shape = logits.sizes().vec();
    shape.back() = n_;
    shape.push_back(n_);
    // Copied to the device once: a copy from host memory in every forward waited for it, and a
    // CUDA graph cannot capture one.
    if (!on_device_.defined() || on_device_.device() != logits.device())
      on_device_ = perms_.to(logits.device());
    return torch::matmul(torch::softmax(logits, -1), on_device_.to(logits.scalar_type())).view(shape);
  }

 private:
  torch::Tensor perms_;      // [n!, n*n]
  torch::Tensor on_device_;  // perms_ on the device the last forward ran on
};

}  // namespace

std::shared_ptr<TopologyImpl> make_mhc_lite(const config::ModelConfig& cfg) {
  if (cfg.hc_rate > kMaxStreams)
    throw Error("mhc_lite mixes n! permutation matrices; model.hc_rate " + std::to_string(cfg.hc_rate) +
                    " makes " + std::to_string(factorial(cfg.hc_rate)) + " of them",
                "model.hc_rate", "set model.hc_rate to at most " + std::to_string(kMaxStreams));
  return std::make_shared<MhcLite>(cfg);
}

}  // namespace siamese::model
