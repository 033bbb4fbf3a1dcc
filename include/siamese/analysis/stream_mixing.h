#pragma once
// How much each stream of a two-stream (SiameseNorm) model contributes, read from the
// learned norm scales (paper Fig. 6) and the final fusion norms (paper: 1.05 for the
// HybridNorm stream vs 0.42 for the Pre-Norm stream at 1.3B).
//
// Read by OLMo parameter name (olmo_names.h), the official SiameseNorm code's convention:
// the Y (Pre-Norm) stream's norm at a fusion site is `<site>_y_norm` (blocks.{i}.attn_y_norm,
// blocks.{i}.ff_y_norm) and at the output `ln_y_f`; the X stream's counterpart is the same
// name without `_y` (attn_norm, ff_norm, ln_f), times the learnable vector `c1` where X
// enters attention. An X side with no learned scale (hybrid_pre's attention input without
// gamma) counts as 1. A model without `_y_` norms (every single-stream topology) has no
// sites and no final fusion.
#include <optional>
#include <string>
#include <vector>

#include "siamese/model/transformer.h"

namespace siamese::analysis {

struct MixingSite {
  int64_t layer = 0;
  std::string site;    // "attn" or "ff"
  double x_scale = 0;  // mean |weight| of the X side (elementwise product of its factors)
  double y_scale = 0;  // mean |weight| of the Y-stream norm
  double x_share() const { return x_scale / (x_scale + y_scale); }
};

struct StreamMixing {
  std::vector<MixingSite> sites;  // by layer, attn before ff
  std::optional<double> final_x;  // mean |ln_f.weight|
  std::optional<double> final_y;  // mean |ln_y_f.weight|
};

StreamMixing stream_mixing(model::TransformerImpl& model);

}  // namespace siamese::analysis
