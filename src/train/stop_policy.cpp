#include "siamese/train/stop_policy.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <csignal>

namespace siamese::train {

namespace {
// A signal handler can only reach process-global state.
std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal.store(sig); }
}  // namespace

void install_stop_handlers() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
}

int stop_signal() { return g_stop_signal.load(); }

using Clock = std::chrono::steady_clock;

StopPolicy::StopPolicy(std::optional<double> time_limit, dist::Collectives& ranks, int64_t stop_at,
                       Clock::time_point started)
    : time_limit_(time_limit), ranks_(ranks), stop_at_(stop_at), started_(started) {
  install_stop_handlers();
}

StopPolicy::Stop StopPolicy::check(int64_t step, int64_t first_step, Clock::time_point loop_start,
                                   int64_t read_interval, double save_seconds) {
  const int sig = stop_signal();
  if (ranks_.sum(sig != 0 ? 1.0 : 0.0) > 0) {
    signal_ = sig;
    spdlog::warn("signal {} received: saving at step {} and stopping", sig, step);
    return Stop::Signal;
  }
  if (!time_limit_) return Stop::None;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const double per_step = since(loop_start) / double(step - first_step);
  const double at_next_check = since(started_) + per_step * double(read_interval);
  if (ranks_.sum(at_next_check + save_seconds >= *time_limit_ ? 1.0 : 0.0) == 0) return Stop::None;
  spdlog::info(
      "stopping at step {}: time_limit {} s would pass before the next check; resume with the same command",
      step, *time_limit_);
  return Stop::TimeLimit;
}

}  // namespace siamese::train
