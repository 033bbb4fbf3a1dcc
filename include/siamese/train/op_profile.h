#pragma once
// Where a step's host time goes, operator by operator: LibTorch's profiler (the one behind
// torch.profiler) records every ATen op and autograd node between start and stop, and the
// events are folded into self time per op name (time inside the op minus the ops it
// called), the figure torch.profiler's key_averages() sorts by as "Self CPU". `siamese
// bench --profile` prints it next to the step split; scripts/bench_pytorch.py --profile
// prints the same table for the PyTorch step.
#include <cstdint>
#include <string>
#include <vector>

namespace siamese::train {

struct OpTime {
  std::string name;
  double self_seconds = 0;
  double total_seconds = 0;  // including the ops it called
  int64_t calls = 0;
};

class OpProfile {
 public:
  // Starts recording host-side ops on every thread (autograd's backward included), and with
  // `device_activity` the GPU's kernels, copies and memsets.
  explicit OpProfile(bool device_activity = false);
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  struct Result {
    std::vector<OpTime> host;    // by self time, largest first
    std::vector<OpTime> device;  // GPU activity by duration (device work does not nest)
  };
  // Stops recording; with `trace_path`, also writes every event there as a Chrome trace (JSON
  // that Perfetto, chrome://tracing and TensorBoard's profiler open).
  Result stop(const std::string& trace_path = "");

 private:
  bool running_ = true;
};

// Self time per op from intervals that nest on each thread: each event's own time is its
// duration minus that of the events directly inside it. Exposed for its test.
struct OpInterval {
  std::string name;
  uint64_t thread = 0;
  uint64_t start_ns = 0, end_ns = 0;
};
std::vector<OpTime> self_times(std::vector<OpInterval> intervals);

}  // namespace siamese::train
