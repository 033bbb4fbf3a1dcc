#pragma once
// When a run stops before max_duration: a signal (SIGTERM, SIGINT, SIGUSR1: save and exit
// kExitStopped), the time limit (save while a checkpoint still fits, exit 0), or the step
// a caller asked for (RunControl::stop_at). Ranks agree on each, since a signal may reach
// them at different steps.
#include <chrono>
#include <cstdint>
#include <optional>

#include "siamese/dist/collectives.h"

namespace siamese::train {

// Stop requests from SIGTERM / SIGINT (cluster preemption, Ctrl-C): the loop polls
// stop_signal() between steps, saves a checkpoint and exits cleanly.
void install_stop_handlers();
int stop_signal();  // 0 when no signal arrived

class StopPolicy {
 public:
  enum class Stop { None, Signal, TimeLimit };

  // `time_limit`: seconds from `started`, when the run began (the config's time_limit).
  StopPolicy(std::optional<double> time_limit, dist::Collectives& ranks, int64_t stop_at,
             std::chrono::steady_clock::time_point started);

  // At a read point after `step` (every rank calls it): a signal any rank got, or a time
  // limit that would pass before the next check at the mean step time since the loop began
  // at `first_step`, with `save_seconds` kept in hand for the final save.
  Stop check(int64_t step, int64_t first_step, std::chrono::steady_clock::time_point loop_start,
             int64_t read_interval, double save_seconds);
  // Whether the caller asked to stop after `step`.
  bool requested(int64_t step) const { return step == stop_at_; }
  int signal() const { return signal_; }

 private:
  std::optional<double> time_limit_;
  dist::Collectives& ranks_;
  int64_t stop_at_;
  std::chrono::steady_clock::time_point started_;
  int signal_ = 0;
};

}  // namespace siamese::train
