#include "siamese/train/op_profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <torch/cuda.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

namespace siamese::train {

namespace prof = torch::profiler::impl;

namespace {

std::vector<OpTime> by_self_time(std::map<std::string, OpTime> by_name) {
  std::vector<OpTime> out;
  for (auto& [name, t] : by_name) {
    t.name = name;
    out.push_back(t);
  }
  std::sort(out.begin(), out.end(),
            [](const OpTime& a, const OpTime& b) { return a.self_seconds > b.self_seconds; });
  return out;
}

}  // namespace

OpProfile::OpProfile(bool device_activity) {
  // Kineto probes for GPUs when it starts and logs an error line where there is no driver;
  // on a CPU-only machine that line is noise. A KINETO_LOG_LEVEL the user set wins.
  if (!torch::cuda::is_available()) ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO, /*report_input_shapes=*/false,
                                    /*profile_memory=*/false);
  std::set<prof::ActivityType> activities{prof::ActivityType::CPU};
  if (device_activity) activities.insert(prof::ActivityType::CUDA);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
}

OpProfile::~OpProfile() {
  if (running_) torch::autograd::profiler::disableProfiler();
}

OpProfile::Result OpProfile::stop(const std::string& trace_path) {
  running_ = false;
  const auto result = torch::autograd::profiler::disableProfiler();
  if (!trace_path.empty()) result->save(trace_path);
  std::vector<OpInterval> host;
  std::map<std::string, OpTime> device;  // device work does not nest: self time is duration
  for (const auto& e : result->events()) {
    if (e.endNs() <= e.startNs()) continue;
    if (e.deviceType() == c10::DeviceType::CPU) {
      host.push_back({e.name(), e.startThreadId(), e.startNs(), e.endNs()});
    } else {
      OpTime& t = device[e.name()];
      t.self_seconds = t.total_seconds += (e.endNs() - e.startNs()) * 1e-9;
      ++t.calls;
    }
  }
  return {self_times(std::move(host)), by_self_time(std::move(device))};
}

std::vector<OpTime> self_times(std::vector<OpInterval> intervals) {
  // Per thread, by start; an enclosing event before the events it contains.
  std::sort(intervals.begin(), intervals.end(), [](const OpInterval& a, const OpInterval& b) {
    return std::tie(a.thread, a.start_ns, b.end_ns) < std::tie(b.thread, b.start_ns, a.end_ns);
  });
  std::map<std::string, OpTime> by_name;
  std::vector<std::pair<const OpInterval*, uint64_t>> open;  // event, time of its direct children
  auto close = [&](const OpInterval* e, uint64_t children_ns) {
    OpTime& t = by_name[e->name];
    const uint64_t duration = e->end_ns - e->start_ns;
    t.total_seconds += duration * 1e-9;
    t.self_seconds += (duration - std::min(duration, children_ns)) * 1e-9;
    ++t.calls;
  };
  for (const auto& e : intervals) {
    while (!open.empty() &&
           (open.back().first->thread != e.thread || open.back().first->end_ns <= e.start_ns)) {
      close(open.back().first, open.back().second);
      open.pop_back();
    }
    if (!open.empty()) open.back().second += std::min(e.end_ns, open.back().first->end_ns) - e.start_ns;
    open.emplace_back(&e, 0);
  }
  for (; !open.empty(); open.pop_back()) close(open.back().first, open.back().second);
  return by_self_time(std::move(by_name));
}

}  // namespace siamese::train
