// DeepNorm (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers",
// arXiv 2203.00555): Post-LN with an up-weighted residual and a down-scaled init,
//   x = LN_s(alpha * x + F_s(x)) for every sublayer s;  out = x.
// Constants for an N-layer decoder-only model (the paper's decoder-only row):
//   alpha = (2N)^(1/4),  beta = (8N)^(-1/4).
// The paper initializes the FFN, value and attention-output projections with Xavier-normal
// gain beta and the query/key projections with gain 1; here beta multiplies those weights
// after the config's init_fn (TopologyImpl::init_gain), which keeps the paper's relative
// down-scaling whatever init_fn is.
#include <cmath>

#include "placement_rules.h"
#include "siamese/model/topology.h"

namespace siamese::model {

std::shared_ptr<TopologyImpl> make_scaled_post(const config::ModelConfig& cfg, double alpha,
                                               double beta);  // post.cpp

DeepNormConstants deepnorm_constants(int64_t n_layers) {
  const double n = static_cast<double>(n_layers);
  return {std::pow(2.0 * n, 0.25), std::pow(8.0 * n, -0.25)};
}

std::shared_ptr<TopologyImpl> make_deepnorm(const config::ModelConfig& cfg) {
  const auto k = deepnorm_constants(cfg.n_layers);
  return make_scaled_post(cfg, k.alpha, k.beta);
}

}  // namespace siamese::model
