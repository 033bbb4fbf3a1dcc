#pragma once
// One optimizer step, the same for `siamese train`, `siamese bench` and the tests: forward
// and backward over micro-batches (autocast, the flash-only attention scope, loss scaling)
// of the cross-entropy plus, with softmax_auxiliary_loss, OLMo's z-loss, and whatever
// auxiliary losses the blocks attach (aux_loss.h); unscale, clip, and an update that a
// non-finite loss or gradient cancels on the device. The plan's gradient strategy
// communicates from its own autograd hooks; the work around the update (the strategy waiting
// for its gradients, a sharded strategy's gather, a topology's weight projection) runs as the
// optimizer's hooks. Nothing here waits for the device. With cuda_graphs the full
// micro-batches replay one captured graph (micro_batch_graph.h).
#include <torch/torch.h>

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "siamese/config/sections.h"
#include "siamese/dist/parallel_plan.h"
#include "siamese/model/documents.h"
#include "siamese/model/step_values.h"
#include "siamese/model/transformer.h"
#include "siamese/train/device_clock.h"
#include "siamese/train/loss_scale.h"
#include "siamese/train/micro_batch_graph.h"
#include "siamese/train/optimizer.h"

namespace siamese::train {

// What a step leaves on the device (float64): its values, norm and scale.
struct StepResult {
  // step_values.h, reduced over ranks: "loss" (the mean cross-entropy) first, "z_loss" with
  // softmax_auxiliary_loss, then whatever the blocks add (their auxiliary losses and
  // statistics), each the mean or the total over the global batch.
  model::StepValues values;
  torch::Tensor grad_norm;   // global gradient norm before clipping
  torch::Tensor loss_scale;  // the scale this step's backward used (1 without amp_fp16)
  // Per-block gradient norms before clipping (analysis/grad_norms.h), when asked for.
  std::optional<std::vector<double>> layer_grad_norms;
};

// Device-clock marks of a step's phases (the bench's breakdown).
struct StepMarks {
  // Forward start, backward start, backward end. A replayed graph is one launch: its
  // backward starts where its forward does.
  std::vector<std::array<size_t, 3>> micro_batches;
  size_t update_start = 0;
};

struct StepOptions {
  bool layer_grad_norms = false;  // fill StepResult::layer_grad_norms (every rank asks alike)
  DeviceClock* clock = nullptr;   // with `marks`: the phase marks on this clock
  StepMarks* marks = nullptr;
};

class TrainStep {
 public:
  // micro_batch: sequences per forward on this rank. Each micro-batch's loss is its share of
  // the mean over cfg.global_batch sequences (all ranks).
  TrainStep(const config::StepSection& cfg, model::TransformerImpl& model, Optimizer& optim,
            dist::ParallelPlan& plan, LossScaler& scaler, torch::Device device, int64_t micro_batch);

  // Runs one step on `batch` [rank's sequences, T] (already on the device) at learning rate
  // `lr`. The batch may hold fewer sequences than the rank's share (the instance filter left
  // some out, none at all included): the loss is still divided by the full global count, as
  // OLMo's loss over instances masked by the filter.
  StepResult run(const torch::Tensor& batch, double lr, const StepOptions& options = {});

  // The micro-batches replayed as a CUDA graph so far (0 without cuda_graphs, or where it was
  // refused or its capture failed).
  int64_t graph_replays() const { return graph_ ? graph_->replays() : 0; }

 private:
  model::TransformerImpl& model_;
  Optimizer& optim_;
  dist::ParallelPlan& plan_;
  LossScaler& scaler_;
  torch::Device device_;
  std::optional<at::ScalarType> autocast_;
  bool flash_attention_;
  int64_t micro_batch_;
  double predicted_tokens_;  // B * (T - 1) of the global batch: the loss normaliser
  double max_grad_norm_;
  std::optional<double> z_loss_multiplier_;       // set with softmax_auxiliary_loss
  std::optional<model::DocumentRule> documents_;  // set with data.generate_doc_lengths
  double global_rows_;                            // cfg.global_batch
  bool uneven_shares_;                            // the instance filter on, several ranks
  int64_t n_layers_;
  std::vector<torch::Tensor> params_;  // what the optimizer updates (its gradients are unscaled, clipped)
  std::unique_ptr<MicroBatchGraph> graph_;  // with cuda_graphs, where cuda_graph_refusal allows it
};

}  // namespace siamese::train
