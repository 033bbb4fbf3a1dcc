#pragma once
// Step timing and memory on the training device. On CUDA the clock records events on the
// current stream, so it measures the device's time and never makes the host wait until a
// reading is asked for; on CPU it reads the steady clock.
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

namespace siamese::train {

class DeviceClock {
 public:
  explicit DeviceClock(torch::Device device);
  ~DeviceClock();

  // Marks the current point of the device's work; returns the mark's index.
  size_t mark();
  // Seconds between two marks (waits for the later one to complete on CUDA).
  double seconds(size_t from, size_t to);
  // Forgets every mark but the newest, which becomes mark 0.
  void keep_last();

 private:
  struct Events;
  torch::Device device_;
  std::vector<std::chrono::steady_clock::time_point> host_;
  std::unique_ptr<Events> events_;
};

// Peak memory since the last reset, in MiB: allocated tensors on CUDA (the caching
// allocator's statistics), the resident-set high-water mark of the process on CPU.
double peak_memory_mib(torch::Device device);
void reset_peak_memory(torch::Device device);

}  // namespace siamese::train
