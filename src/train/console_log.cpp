#include "siamese/train/console_log.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace siamese::train {
namespace {

// The longest silence between progress lines of a running train.
constexpr double kConsoleSeconds = 30.0;

}  // namespace

std::string format_eta(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60)
                   : fmt::format("{}m{:02}s", s / 60, s % 60);
}

ConsoleLog::ConsoleLog(int64_t interval, int64_t first_step, int64_t max_steps)
    : interval_(interval),
      first_step_(first_step),
      max_steps_(max_steps),
      last_(std::chrono::steady_clock::now()) {}

void ConsoleLog::write(const MetricsRow& row) {
  if (row.contains(metric::kEvent) || !row.contains(metric::kLoss) || !row.contains("grad_norm")) return;
  const int64_t step = row["step"].get<int64_t>();
  const bool first = step == first_step_ + 1;
  if (!(first || step % interval_ == 0 || step == max_steps_ ||
        std::chrono::steady_clock::now() - last_ >= std::chrono::duration<double>(kConsoleSeconds)))
    return;
  last_ = std::chrono::steady_clock::now();
  // The first step carries the warm-up (allocation, kernel selection, the first data): later
  // estimates leave it out, so the ETA is what the remaining steps take, evaluations and
  // saves included.
  const double elapsed = row["elapsed"].get<double>();
  if (first) first_step_seconds_ = elapsed;
  const double per_step = first ? elapsed : (elapsed - first_step_seconds_) / double(step - first_step_ - 1);
  const auto& z = row.contains(metric::kZLoss) ? row[metric::kZLoss] : MetricsRow();
  const auto& mfu = row.contains("mfu") ? row["mfu"] : MetricsRow();
  spdlog::info(
      "[{}/{}] loss {:.4f} nats/token{}, lr {:.3e}, grad_norm {:.3f}, {:.0f} tokens/s{}, mem {:.0f} MiB, ETA "
      "{}",
      step, max_steps_, row[metric::kLoss].get<double>(),
      z.is_number() ? fmt::format(", z_loss {:.3e}", z.get<double>()) : "",
      row[metric::kLearningRate].get<double>(), row["grad_norm"].get<double>(),
      row["tokens_per_sec"].get<double>(),
      mfu.is_number() ? fmt::format(", MFU {:.1f}%", 100 * mfu.get<double>()) : "",
      row["peak_memory_mib"].get<double>(), format_eta(per_step * double(max_steps_ - step)));
  if (first && max_steps_ > step)
    spdlog::info(
        "expected duration at the first step's speed: {} for {} steps (the first step includes warm-up)",
        format_eta(per_step * double(max_steps_ - first_step_)), max_steps_ - first_step_);
  if (!first && !estimated_ && max_steps_ > step) {
    estimated_ = true;
    spdlog::info(
        "expected duration after warm-up: {} for the {} steps left ({:.3g} s a step over steps {}-{})",
        format_eta(per_step * double(max_steps_ - step)), max_steps_ - step, per_step, first_step_ + 2, step);
  }
}

}  // namespace siamese::train
