#pragma once
// torch_profiling (OLMo's key): a few training steps under LibTorch's Kineto profiler, each
// rank writing <save_folder>/profiler/step<A>-<B>.rank<R>.chrome_trace.json, which Perfetto,
// chrome://tracing and TensorBoard's profiler open. The schedule is OLMo-core's
// ProfilerCallback default: of this process's steps, 1 waits, 5 warm up, 3 are traced (steps
// of a resumed run count from its first one). Off, it costs a comparison per step.
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "siamese/train/op_profile.h"

namespace siamese::train {

class StepProfiler {
 public:
  static constexpr int64_t kWait = 1, kWarmup = 5, kActive = 3;

  StepProfiler(bool enabled, const std::filesystem::path& run_dir, int rank, int64_t first_step,
               bool device_activity);

  // Around each step (`step` counts from 1, as TrainState::step after the increment).
  void step_begins(int64_t step);
  void step_ends(int64_t step);

  // The steps it traces, [first, last] (0, -1 when off), and where the trace goes.
  int64_t first() const { return first_; }
  int64_t last() const { return last_; }
  const std::filesystem::path& trace_path() const { return path_; }

 private:
  int64_t first_ = 0, last_ = -1;
  bool device_activity_ = false;
  std::filesystem::path path_;
  std::unique_ptr<OpProfile> profile_;
};

}  // namespace siamese::train
