#include "siamese/train/device_clock.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <fstream>
#include <string>

namespace siamese::train {

struct DeviceClock::Events {
  std::vector<std::unique_ptr<at::cuda::CUDAEvent>> marks;
};

DeviceClock::DeviceClock(torch::Device device) : device_(device), events_(std::make_unique<Events>()) {}

DeviceClock::~DeviceClock() = default;

size_t DeviceClock::mark() {
  if (!device_.is_cuda()) {
    host_.push_back(std::chrono::steady_clock::now());
    return host_.size() - 1;
  }
  events_->marks.push_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
  events_->marks.back()->record();
  return events_->marks.size() - 1;
}

double DeviceClock::seconds(size_t from, size_t to) {
  if (!device_.is_cuda()) return std::chrono::duration<double>(host_.at(to) - host_.at(from)).count();
  events_->marks.at(to)->synchronize();
  return events_->marks.at(from)->elapsed_time(*events_->marks.at(to)) / 1000.0;
}

void DeviceClock::keep_last() {
  if (host_.size() > 1) host_.erase(host_.begin(), host_.end() - 1);
  auto& m = events_->marks;
  if (m.size() > 1) m.erase(m.begin(), m.end() - 1);
}

double peak_memory_mib(torch::Device device) {
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return double(stats.allocated_bytes[aggregate].peak) / (1 << 20);
  }
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

void reset_peak_memory(torch::Device device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

}  // namespace siamese::train
