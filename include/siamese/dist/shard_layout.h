#pragma once
// How the optimizer's parameters and state are laid out over the ranks: whole on every rank,
// or a flat shard of each parameter per rank. The optimizer, Muon, checkpoint loading and the
// per-layer gradient norms take this.
#include <torch/torch.h>

#include <string>

namespace siamese::dist {

class ShardLayout {
 public:
  virtual ~ShardLayout() = default;
  using NamedTensors = torch::OrderedDict<std::string, torch::Tensor>;
  // What the optimizer updates, by parameter name: the parameters themselves, or this rank's
  // flat shard of each.
  virtual NamedTensors optimizer_params(const NamedTensors& params) = 0;
  // Sums over ranks a quantity each rank computed from its share of the gradients (squared
  // norms). Where every rank holds them whole there is nothing to add.
  virtual void sum_shards_(torch::Tensor& tensor) = 0;
  // How many ranks hold distinct optimizer state, each saving its own shard (1: rank 0
  // saves it whole).
  virtual int optimizer_shards() const = 0;
  // Which of those shards this rank writes: -1 where a rank of another replica holds the
  // same one and writes it (HYBRID_SHARD).
  virtual int optimizer_shard_rank() const = 0;
  // This rank's part of `whole`, a tensor shaped like a parameter (optimizer state saved
  // whole), laid out as optimizer_params() holds it.
  virtual torch::Tensor shard_of(const torch::Tensor& whole) = 0;
  // The reverse, on every rank at once: the tensor shaped `shape` whose parts the ranks hold
  // as `piece` (Muon orthogonalises whole matrices).
  virtual torch::Tensor whole_of(const torch::Tensor& piece, at::IntArrayRef shape) = 0;
};

// Every rank holds the parameters and the optimizer state whole (one process, ddp).
class WholeLayout : public ShardLayout {
 public:
  explicit WholeLayout(int rank = 0) : rank_(rank) {}
  NamedTensors optimizer_params(const NamedTensors& params) override { return params; }
  void sum_shards_(torch::Tensor&) override {}
  int optimizer_shards() const override { return 1; }
  int optimizer_shard_rank() const override { return rank_; }
  torch::Tensor shard_of(const torch::Tensor& whole) override { return whole; }
  torch::Tensor whole_of(const torch::Tensor& piece, at::IntArrayRef shape) override {
    return piece.view(shape);
  }

 private:
  int rank_;
};

}  // namespace siamese::dist
