#pragma once
// Muon (Keller Jordan, kellerjordan.github.io/posts/muon): momentum whose update is
// orthogonalised by a quintic Newton-Schulz iteration, for 2-D matrices. The arithmetic is
// torch.optim.Muon's (torch 2.11, torch/optim/_muon.py) op for op, so the two agree bit for
// bit on the CPU (tests/train/muon_reference.py): per matrix W [A, B] with gradient G,
//   B_t = lerp(B_{t-1}, G, 1 - momentum)                       (momentum buffer)
//   U   = nesterov ? lerp(G, B_t, momentum) : B_t
//   O   = Newton-Schulz(U) in bfloat16: U / max(|U|_F, eps), then ns_steps of
//         X <- a X + (b X X^T + c (X X^T)^2) X, on the wide orientation (A <= B)
//   W  <- W * (1 - lr * weight_decay) - lr' * O
// where lr' = lr * sqrt(max(1, A/B)) (adjust_lr original) or lr * 0.2 * sqrt(max(A, B))
// (match_rms_adamw, Moonshot's "Muon is Scalable for LLM Training").
// A stack of matrices [E, A, B] (block_type moe's experts) is E matrices: each one is
// orthogonalised on its own and steps at the lr' of its [A, B], as torch.optim.Muon given
// the E matrices as parameters of their own (the momentum is elementwise either way).
// Under a sharded strategy each rank holds a flat chunk of every matrix: the momentum and the
// direction U are computed on the chunk, U is gathered whole (ShardLayout::whole_of) for
// Newton-Schulz on every rank, and each rank applies its chunk of O. The arithmetic is the
// unsharded one, so a sharded run takes the same steps (tests/dist/sharded_test.cpp).
#include <torch/torch.h>

#include <array>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "siamese/config/enums.h"
#include "siamese/dist/shard_layout.h"

namespace siamese::train {

// torch's defaults (from Keller Jordan's muon.py).
inline constexpr std::array<double, 3> kNewtonSchulzCoefficients = {3.4445, -4.7750, 2.0315};
inline constexpr double kNewtonSchulzEps = 1e-7;

struct MuonOptions {
  double lr = 1e-3;
  double weight_decay = 0.1;
  double momentum = 0.95;
  bool nesterov = true;
  int64_t ns_steps = 5;
  config::MuonLrAdjust adjust_lr = config::MuonLrAdjust::Original;
};

// The Newton-Schulz orthogonalisation of a 2-D `update`, as a bfloat16 matrix of its shape.
torch::Tensor newton_schulz(const torch::Tensor& update, int64_t steps);

// The step size of a matrix of `shape` [..., A, B] at learning rate `lr` (adjust_lr above).
double adjusted_lr(double lr, config::MuonLrAdjust adjust_lr, torch::IntArrayRef shape);

class Muon {
 public:
  // Every parameter must be a 2-D matrix or a 3-D stack of them. Where `params` are a sharded
  // strategy's chunks, `shapes` gives each one's whole shape and `shards` the strategy.
  Muon(std::vector<torch::Tensor> params, MuonOptions options, std::vector<std::vector<int64_t>> shapes = {},
       dist::ShardLayout* shards = nullptr);

  // One update of every matrix that has a gradient. `skip` (a 0/1 float32 scalar on the
  // parameters' device) cancels it, momentum included, without a host sync.
  void update(const std::optional<torch::Tensor>& skip = std::nullopt);

  void set_lr(double lr) { options_.lr = lr; }
  const MuonOptions& options() const { return options_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  bool owns(const torch::Tensor& param) const;
  // The momentum buffer of `param` (one of params()); undefined before its first update.
  torch::Tensor& momentum_buffer(const torch::Tensor& param);

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::vector<int64_t>> shapes_;
  dist::ShardLayout* shards_;
  std::unordered_map<const c10::TensorImpl*, torch::Tensor> buffers_;
  MuonOptions options_;
};

}  // namespace siamese::train
