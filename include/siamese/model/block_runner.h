#pragma once
// What runs each transformer block, for a strategy that holds only some blocks' parameters
// at a time (fsdp FULL_SHARD gathers a block's parameters before it runs and frees them
// after). train::parallelize installs one on the model; without one a block just runs.
// Every forward through TransformerImpl::hidden goes through it, in block order; a
// checkpointed block's recomputation during backward does not.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace siamese::model {

class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  // Runs block `layer` by calling `block`, which replaces `streams` (the residual streams)
  // with those the block leaves; a stream the block does not change stays the same tensor.
  // Backward reaches the block through the gradients of the streams it made, so that is
  // where its parameters are needed again.
  virtual void run(int64_t layer, std::vector<torch::Tensor>& streams,
                   const std::function<void()>& block) = 0;
};

// Runs each block as it is: the runner of a model no strategy changed.
BlockRunner& direct_blocks();

}  // namespace siamese::model
