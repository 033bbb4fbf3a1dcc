#pragma once
// The constants of single-stream placements, defined once in their own files and used both
// there and where SiameseNorm gives its X stream that placement (siamese.cpp).
#include <cstdint>

#include "siamese/model/topology.h"

namespace siamese::model {

// DeepNet's decoder-only constants for n_layers blocks (deepnorm.cpp).
struct DeepNormConstants {
  double alpha, beta;
};
DeepNormConstants deepnorm_constants(int64_t n_layers);

// DeepNet's init gain: beta on value, attention-output and FFN weights, 1 on query and key
// (post.cpp).
double deepnet_gain(Projection p, double beta);

// Mix-LN's number of leading Post-Norm layers, floor(mixln_alpha * n_layers) (mixln.cpp).
int64_t mixln_post_layers(const config::ModelConfig& cfg);

// LayerNorm Scaling's factor on layer `layer`'s (0-based) normalized input, 1/sqrt(layer+1)
// (pre.cpp).
double lns_input_scale(int64_t layer);

}  // namespace siamese::model
