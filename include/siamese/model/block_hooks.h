#pragma once
// Calls around each transformer block, for a strategy that holds only some blocks'
// parameters at a time (fsdp FULL_SHARD gathers a block's parameters before it runs and
// frees them after). Every forward through TransformerImpl::hidden makes them, in block
// order; a checkpointed block's recomputation during backward does not.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace siamese::model {

class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  // Block `layer` is about to run: its parameters, and the next block's, must hold their
  // values (a topology may fuse the next sublayer's input norm into this block's update).
  virtual void before_block(int64_t layer) = 0;
  // Block `layer` has run: `before` are the residual streams it was given, `after` those it
  // left (a stream it did not change is the same tensor in both). Backward reaches the block
  // through the gradients of the streams it made, so that is where its parameters are needed
  // again.
  virtual void after_block(int64_t layer, const std::vector<torch::Tensor>& before,
                           const std::vector<torch::Tensor>& after) = 0;
};

}  // namespace siamese::model
