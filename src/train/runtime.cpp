#include "siamese/train/runtime.h"

#include <c10/cuda/CUDAFunctions.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <csignal>
#include <thread>

#include "siamese/common/error.h"

namespace siamese::train {

namespace {
// A signal handler can only reach process-global state.
std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal.store(sig); }
}  // namespace

void configure_cpu_runtime() {
  // An explicit OMP_NUM_THREADS wins (e.g. tests sharing a busy machine).
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (!std::getenv("OMP_NUM_THREADS") && cores > 0 && at::get_num_threads() < cores)
    at::set_num_threads(cores);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void configure_cuda_runtime(torch::Device device, bool allow_tf32) {
  c10::cuda::set_device(device.index());
  at::globalContext().setAllowTF32CuBLAS(allow_tf32);
  at::globalContext().setAllowTF32CuDNN(allow_tf32);
}

torch::Device resolve_device(const std::string& device, int local_rank) {
  if (device == "cpu") return torch::kCPU;
  if (device == "cuda") {
    if (!torch::cuda::is_available())
      throw Error("device is cuda but no CUDA device is available", "device",
                  "use device: cpu (or auto), or build against a CUDA LibTorch");
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  }
  return torch::cuda::is_available()
             ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank))
             : torch::Device(torch::kCPU);
}

void install_stop_handlers() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
}

int stop_signal() { return g_stop_signal.load(); }

}  // namespace siamese::train
