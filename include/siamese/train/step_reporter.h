#pragma once
// What the run tells about its steps: the metrics rows to its sinks (metrics.jsonl and
// TensorBoard on rank 0, the console's progress lines), and what the bad-step policy
// (bad_step_policy.h) makes of a non-finite step.
// Steps run ahead of the host: each leaves its values on the device, and the reporter
// reads the pending ones in one copy at a read point. On CUDA that is once per
// console_log_interval and before any evaluation, checkpoint or stop, so the GPU never idles
// while the host waits; on CPU reading is free and happens every step.
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "siamese/common/metrics_row.h"
#include "siamese/config/sections.h"
#include "siamese/train/bad_step_policy.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/console_log.h"
#include "siamese/train/device_clock.h"
#include "siamese/train/device_peaks.h"
#include "siamese/train/loss_scale.h"
#include "siamese/train/metrics.h"
#include "siamese/train/tensorboard.h"
#include "siamese/train/train_step.h"

namespace siamese::train {

// A step whose values are still on the device.
struct PendingStep {
  int64_t step = 0, tokens = 0;
  double lr = 0, elapsed = 0, comm_seconds = 0;
  int64_t filtered = 0;  // instances the instance filter left out, all ranks
  StepResult result;
  size_t start_mark = 0, end_mark = 0;  // on clock()
};

class StepReporter {
 public:
  // `main_rank` writes the rows into `run_dir`, dropping those after `first_step` that an
  // interrupted run left.
  StepReporter(const config::ReportSection& cfg, torch::Device device, bool main_rank, int world_size,
               const std::filesystem::path& run_dir, int64_t first_step, int64_t max_steps);

  // An event row (evaluation, resume, non-finite weights, time limit), written at once.
  void event(const MetricsRow& row);
  DeviceClock& clock() { return clock_; }
  // Whether `step` is a read point of its own (every step on CPU, console_log_interval on CUDA).
  bool read_due(int64_t step) const { return step % read_interval_ == 0; }
  int64_t read_interval() const { return read_interval_; }

  void add(PendingStep step) { pending_.push_back(std::move(step)); }
  // Writes the pending steps' rows. A non-finite step was already skipped on the device (its
  // update cancelled); here it is counted in state.bad_steps, and past max_bad_steps this
  // returns kExitNonFinite (else 0).
  int flush(TrainState& state, const LossScaler& scaler);

 private:
  const config::ReportSection cfg_;
  torch::Device device_;
  std::filesystem::path run_dir_;
  int64_t read_interval_, tokens_per_step_;
  double flops_per_token_;
  MfuPeak peak_;
  std::optional<double> peak_flops_;
  // metrics.jsonl, TensorBoard's events and the W&B streamer (which reads metrics.jsonl) on
  // the main rank, then the console's progress lines.
  std::vector<std::unique_ptr<MetricsSink>> sinks_;
  BadStepPolicy bad_steps_;
  DeviceClock clock_;
  SpikeDetector spikes_;
  std::vector<PendingStep> pending_;
};

}  // namespace siamese::train
