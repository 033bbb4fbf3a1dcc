#pragma once
// `siamese coord-check CONFIG`: the coordinate check of μP (Yang et al. 2022, arXiv 2203.03466,
// Sec. 4 / Fig. 5) and CompleteP (Dey et al. 2025, arXiv 2505.01618) over this trainer's
// models. The config's model is rebuilt at each width (d_model, heads kept, MLP scaled with it)
// and at each depth (n_layers), its base shape (model.mup.*) pinned to the config's own, and
// trained a few steps at the config's peak learning rate on its data; before every step the
// RMS of each layer's activations is measured on that step's batch. Under a parametrization
// that transfers, the RMS stays flat across sizes at every step; under standard
// parametrization the later steps' drift with width (logits, attention outputs) or depth.
#include <cstdint>
#include <string>
#include <vector>

#include "siamese/config/config.h"

namespace siamese::train {

struct CoordCheckOptions {
  std::vector<int64_t> widths;  // d_model values, at the config's n_layers
  std::vector<int64_t> depths;  // n_layers values, at the config's d_model
  int steps = 4;
};

// One activation's RMS: `site` is embedding, logits, or layer{l}.{attn_out, ffn_out, <stream>}.
struct CoordPoint {
  std::string axis;  // width or depth
  int64_t size = 0;
  int step = 0;  // 0: at init, before the first update
  std::string site;
  double rms = 0;
};

std::vector<CoordPoint> coord_check(const config::TrainConfig& cfg, const CoordCheckOptions& options);

// Per axis, the least-squares slope of log2 RMS against log2 size at `step` of each site kind
// (embedding, attn_out, ffn_out, stream: the last layer's stream, logits; layers averaged): 0
// is flat, 1 doubles with each doubling of size.
struct CoordSlope {
  std::string axis, kind;
  double slope = 0;
  std::vector<double> rms;  // per size, in the order of the options
};
std::vector<CoordSlope> coord_slopes(const std::vector<CoordPoint>& points, int step);

}  // namespace siamese::train
