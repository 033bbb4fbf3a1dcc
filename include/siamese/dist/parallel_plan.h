#pragma once
// How a run is spread over its ranks: the plan that train/parallelize.cpp applies to the model
// and optimizer once, and the two narrow views of it that the rest of the code takes. Each rank
// normalises its loss by the token count of the whole global batch, so SUMMING gradients over
// ranks gives exactly the single-process gradient. A launched run builds a subclass
// (dist/data_parallel.h for ddp, dist/sharded.h for the fsdp strategies); the base class is the
// world of one. The communication itself is dist/communicator.h's, which the subclasses own.
#include <torch/torch.h>

#include <string>

#include "siamese/model/block_hooks.h"

namespace siamese::dist {

// What code outside the step needs of the ranks: who this rank is, sums over ranks and a
// barrier. Evaluators, the stop policy, the rank agreement and the loss terms take this.
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Index of this rank on its node: its CUDA device.
  virtual int local_rank() const = 0;
  // Ranks on this node (0: the launcher did not say): on the CPU they share its memory.
  virtual int local_world_size() const = 0;
  // Sums of per-rank scalars (loss, token counts, eval sums).
  virtual double sum(double value) = 0;
  // The largest of per-rank scalars (how many micro-batches the longest share needs).
  virtual double max(double value) = 0;
  // In-place sum of a tensor on the training device over ranks (no host sync on CUDA).
  virtual void sum_(torch::Tensor& tensor) = 0;
  // Every rank waits here until all arrive (e.g. while rank 0 writes a checkpoint).
  virtual void barrier() = 0;
};

// How the optimizer's parameters and state are laid out over the ranks: whole on every rank,
// or a flat shard of each parameter per rank. The optimizer, Muon, checkpoint loading and the
// per-layer gradient norms take this.
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

// The parallelism of a run, the one place that knows it: the collectives, the layout of the
// optimizer's state, what it hooks into the model and the optimizer (applied once, by
// train::parallelize), and what the step calls around backward. This base class is the world
// of one: every call is a no-op.
class ParallelPlan : public Collectives, public ShardLayout {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world_size() const override { return 1; }
  double sum(double value) override { return value; }
  double max(double value) override { return value; }
  void sum_(torch::Tensor& tensor) override {}
  void barrier() override {}

  NamedTensors optimizer_params(const NamedTensors& params) override { return params; }
  void sum_shards_(torch::Tensor& tensor) override {}
  int optimizer_shards() const override { return 1; }
  int optimizer_shard_rank() const override { return rank(); }
  torch::Tensor shard_of(const torch::Tensor& whole) override { return whole; }
  torch::Tensor whole_of(const torch::Tensor& piece, at::IntArrayRef shape) override {
    return piece.view(shape);
  }

  // Called before each micro-batch's backward; only the last one of a step needs to
  // communicate (earlier ones accumulate locally).
  virtual void before_backward(bool last_micro_batch) {}
  // Called after the last backward of a step: leave the summed gradients in p.grad().
  virtual void after_backward() {}
  // Seconds the last step spent blocked on gradient communication (metrics' comm_share).
  virtual double take_comm_seconds() { return 0; }
  // Makes every rank's parameters equal rank 0's and takes charge of their gradients
  // (hooks that start communication during backward). Called once, before training.
  virtual void attach(const std::vector<torch::Tensor>& params) {}
  // After the optimizer updated optimizer_params(): makes every parameter whole again.
  virtual void after_update() {}
  // The whole parameters were overwritten (a checkpoint loaded, nGPT's projection): a
  // sharded strategy's shards take their values again.
  virtual void params_changed() {}
  // Bytes this rank keeps between steps for gradients and their communication buffers, for
  // parameters of `param_bytes`: one process keeps a gradient per parameter.
  virtual int64_t gradient_bytes(int64_t param_bytes) const { return param_bytes; }
  // Bytes this rank keeps between steps for parameters of `param_bytes` in all, master
  // copies included.
  virtual int64_t parameter_bytes(int64_t param_bytes) const { return param_bytes; }
  // What the model calls around each block (TransformerImpl::set_block_hooks), for a
  // strategy that does not keep every block's parameters; null when it does.
  virtual model::BlockHooks* block_hooks() { return nullptr; }
  // Every rank calls these around reading the whole parameters outside a forward (rank 0
  // writing the model's checkpoint): the first makes them whole, the second lets the
  // strategy drop what it does not keep.
  virtual void make_params_whole() {}
  virtual void release_params() {}
  // The strategy in words, for the start-up log.
  virtual std::string strategy() const { return "one process"; }
};

// The parameters whole for the length of a scope, on every rank (see make_params_whole).
class WholeParams {
 public:
  explicit WholeParams(ParallelPlan& sync) : sync_(sync) { sync_.make_params_whole(); }
  ~WholeParams() { sync_.release_params(); }
  WholeParams(const WholeParams&) = delete;
  WholeParams& operator=(const WholeParams&) = delete;

 private:
  ParallelPlan& sync_;
};

}  // namespace siamese::dist
