#include "siamese/train/runtime.h"

#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include <fmt/format.h>
#include "siamese/common/error.h"
#include "siamese/config/device.h"
#include "siamese/model/accounting.h"

namespace siamese::train {

void configure_cpu_runtime() {
  // An explicit OMP_NUM_THREADS wins (e.g. tests sharing a busy machine).
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (!std::getenv("OMP_NUM_THREADS") && cores > 0 && at::get_num_threads() < cores)
    at::set_num_threads(cores);
  // Steady-state steps then reuse the heap pages of the step before: without these, glibc
  // returns the vocabulary-sized buffers to the kernel (munmap, or a trim of the heap top)
  // and every step faults them in again, ~0.5 million minor faults and a second of system
  // time per step on configs/tiny/base.yaml (docs/results.md, "Page faults"). The cost is
  // that the process keeps its peak heap until it exits, as a caching allocator does.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
}

void restart_with_short_openmp_spin(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  const char* threads = std::getenv("OMP_NUM_THREADS");
  if ((threads && std::string(threads) == "1") || std::thread::hardware_concurrency() <= 1) return;
  ::setenv("GOMP_SPINCOUNT", kOpenmpSpinCount, 1);
  ::execv("/proc/self/exe", argv);
  ::unsetenv("GOMP_SPINCOUNT");  // exec failed: this process keeps libgomp's default
}

void configure_cuda_runtime(torch::Device device, bool allow_tf32) {
  c10::cuda::set_device(device.index());
  at::globalContext().setAllowTF32CuBLAS(allow_tf32);
  at::globalContext().setAllowTF32CuDNN(allow_tf32);
}

void check_device_choice(const config::DeviceSetting& setting, const config::ModelConfig& model,
                         torch::Device device) {
  if (device.is_cuda() || setting.kind() != config::DeviceSetting::Kind::Auto) return;
  // 16 bytes of weights, gradients and AdamW state per parameter (accounting.h), in doubles.
  const double parameters = model::training_state_bytes(model) / 16.0;
  if (parameters < kCpuFallbackParameters) return;
  throw Error(fmt::format("device is auto and no GPU is visible, so this {:.3g}B-parameter model would train "
                          "on the CPU, orders of magnitude slower than on a GPU",
                          parameters / 1e9),
              "device",
              "run where a GPU is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi), or set device: cpu "
              "to train on the CPU anyway");
}

torch::Device resolve_device(const config::DeviceSetting& setting, int local_rank) {
  const auto cuda = [&] {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(setting.index().value_or(local_rank)));
  };
  switch (setting.kind()) {
    case config::DeviceSetting::Kind::Cpu:
      return torch::kCPU;
    case config::DeviceSetting::Kind::Cuda:
      if (!torch::cuda::is_available())
        throw Error("device is " + setting.text() + " but no CUDA device is available", "device",
                    "use device: cpu (or auto), or build against a CUDA LibTorch");
      return cuda();
    case config::DeviceSetting::Kind::Auto:
      break;
  }
  return torch::cuda::is_available() ? cuda() : torch::Device(torch::kCPU);
}

}  // namespace siamese::train
