#include "siamese/train/step_profiler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace siamese::train {

StepProfiler::StepProfiler(bool enabled, const std::filesystem::path& run_dir, int rank, int64_t first_step,
                           bool device_activity)
    : device_activity_(device_activity) {
  if (!enabled) return;
  first_ = first_step + kWait + kWarmup + 1;
  last_ = first_ + kActive - 1;
  path_ = run_dir / "profiler" / fmt::format("step{}-{}.rank{}.chrome_trace.json", first_, last_, rank);
}

void StepProfiler::step_begins(int64_t step) {
  if (step != first_) return;
  std::filesystem::create_directories(path_.parent_path());
  profile_ = std::make_unique<OpProfile>(device_activity_);
}

void StepProfiler::step_ends(int64_t step) {
  if (step != last_ || !profile_) return;
  profile_->stop(path_.string());
  profile_.reset();
  spdlog::info("torch_profiling: steps {}-{} traced to {}", first_, last_, path_.string());
}

}  // namespace siamese::train
