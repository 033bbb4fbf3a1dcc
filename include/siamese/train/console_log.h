#pragma once
// The console as one more metrics sink: progress lines from the step rows it is handed, with
// the run's expected length, after the first step, then every console_log_interval steps or
// every 30 s, whichever comes first, and at the last step. Event rows and other rows without
// a loss (per-layer gradient norms) are not progress: it ignores them.
#include <chrono>
#include <cstdint>
#include <string>

#include "siamese/common/metrics_row.h"

namespace siamese::train {

// "1h05m" or "4m09s".
std::string format_eta(double seconds);

class ConsoleLog : public MetricsSink {
 public:
  // `first_step`: the step the run (re)started from; `max_steps`: where it ends.
  ConsoleLog(int64_t interval, int64_t first_step, int64_t max_steps);
  void write(const MetricsRow& row) override;

 private:
  int64_t interval_, first_step_, max_steps_;
  std::chrono::steady_clock::time_point last_;
  double first_step_seconds_ = 0;  // the run's first step, warm-up included
  bool estimated_ = false;         // the estimate after warm-up was logged
};

}  // namespace siamese::train
