#pragma once
// Every number a user sees about a training step is computed here and written to
// save_folder/metrics.jsonl as a row (common/metrics_row.h); the console, plots and tables
// read these values and never re-derive them.
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "siamese/common/durable_file.h"
#include "siamese/common/metrics_row.h"
#include "siamese/model/accounting.h"
#include "siamese/model/step_values.h"

namespace siamese::train {

struct StepMetrics {
  int64_t step = 0;
  int64_t tokens = 0;
  double loss = 0;  // mean cross-entropy
  // The step's other values by their keys (step_values.h, all ranks): z_loss with
  // softmax_auxiliary_loss, what the blocks added (MoE's losses, unweighted and the mean
  // over blocks, and its routing). Written as they are, a tensor as nested lists.
  model::HostValues terms;
  double lr = 0;
  double grad_norm = 0;  // global norm before clipping
  double step_seconds = 0;
  int64_t step_tokens = 0;
  double flops_per_token = 0;        // training FLOPs (forward + backward)
  std::optional<double> peak_flops;  // hardware peak, FLOP/s summed over ranks
  double elapsed = 0;
  bool loss_spike = false;
  double comm_seconds = 0;           // blocked on the gradient all-reduce after backward (data parallel)
  double peak_memory_mib = 0;        // device_clock.h's peak_memory_mib: CUDA allocator peak, CPU max RSS
  std::optional<double> loss_scale;  // amp_fp16 only: the scale this step's backward used
  std::optional<int64_t> filtered_instances;  // data.instance_filter only: instances left out, all ranks

  // A scalar term's value.
  std::optional<double> term(const std::string& name) const;

  double perplexity() const;
  double tokens_per_sec() const;
  std::optional<double> mfu() const;  // model FLOPs utilisation, 0..1
  MetricsRow to_row() const;
};

// Appends to metrics.jsonl. Opening for a run resumed at `resume_step` first drops lines of
// later steps, written by the interrupted run after its last checkpoint, and a line a kill
// cut short (with a warning).
class MetricsLog : public MetricsSink {
 public:
  MetricsLog(const std::filesystem::path& path, int64_t resume_step);
  // Appends one line; a failed write (a full disk) throws an Error naming the file, so no
  // row is ever dropped silently.
  void write(const MetricsRow& row) override;

 private:
  std::unique_ptr<FileSink> out_;
};

// Flags a loss above `factor` times the median of the last `window` losses.
class SpikeDetector {
 public:
  SpikeDetector(double factor, size_t window = 50) : factor_(factor), window_(window) {}
  bool observe(double loss);

 private:
  double factor_;
  size_t window_;
  std::deque<double> recent_;
};

}  // namespace siamese::train
