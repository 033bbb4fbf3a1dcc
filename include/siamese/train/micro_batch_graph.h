#pragma once
// CUDA graph capture of one micro-batch's forward and backward (the opt-in `cuda_graphs`).
// A step's full micro-batches share one shape. The first `warmup` of them run eagerly on a
// side stream, so that cuBLAS's workspace, the allocator's blocks and autograd's device
// thread exist before the capture; the next is captured on that stream; every later one
// replays the graph: one launch in place of the thousands a micro-batch issues, which bound
// the step when the model is small for the card. A replay reruns the captured kernels on the
// captured addresses, so whatever the graph reads or writes stays put: the ids are copied
// into the graph's own input, gradients accumulate in place into tensors the step zeroes and
// never frees (Optimizer::zero_grad_in_place), the loss scale changes in place, and the
// outputs are copied out after each replay. What would break that is refused up front
// (cuda_graph_refusal). A capture that fails anyway leaves the run eager, with a warning.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "siamese/config/sections.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/step_values.h"

namespace siamese::train {

// What one micro-batch's forward and backward leave besides the gradients.
struct MicroBatchOutput {
  model::LossSums sums;
  model::StepValues values;  // the blocks' (aux_loss.h)
};

// Why a run's micro-batches cannot be graphed, or none when they can: one rank on a CUDA
// device (no collectives in the hooks), whole parameters, and a forward that never reads a
// device value on the host, never varies a shape with the data and draws no random numbers.
std::optional<std::string> cuda_graph_refusal(const config::StepSection& cfg, torch::Device device,
                                              int world_size, bool gathers_blocks);

class MicroBatchGraph {
 public:
  // Runs one micro-batch's forward and backward on `ids`, on the current stream.
  using Work = std::function<MicroBatchOutput(const torch::Tensor& ids)>;

  explicit MicroBatchGraph(int64_t warmup = 3);
  ~MicroBatchGraph();
  MicroBatchGraph(const MicroBatchGraph&) = delete;
  MicroBatchGraph& operator=(const MicroBatchGraph&) = delete;

  // `work` on `ids` (a full micro-batch on the CUDA device), warmed up, captured or replayed.
  // Always the same `work`: after the capture only `ids` changes.
  MicroBatchOutput run(const torch::Tensor& ids, const Work& work);

  int64_t replays() const;
  bool abandoned() const;  // the capture failed: every call runs `work` eagerly

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace siamese::train
