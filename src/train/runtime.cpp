#include "siamese/train/runtime.h"

#include "siamese/model/accounting.h"

#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include <fmt/format.h>
#include "siamese/common/error.h"
#include "siamese/config/device.h"

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

torch::Device resolve_device(const std::string& device, int local_rank) {
  const auto setting = parse_device(device);
  if (!setting)
    throw Error("device \"" + device + "\" is not one of: auto, cpu, cuda, cuda:N", "device",
                "use auto, cpu, cuda or cuda:N");
  const auto cuda = [&] {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(setting->index.value_or(local_rank)));
  };
  switch (setting->kind) {
    case DeviceSetting::Kind::Cpu:
      return torch::kCPU;
    case DeviceSetting::Kind::Cuda:
      if (!torch::cuda::is_available())
        throw Error("device is " + device + " but no CUDA device is available", "device",
                    "use device: cpu (or auto), or build against a CUDA LibTorch");
      return cuda();
    case DeviceSetting::Kind::Auto:
      break;
  }
  return torch::cuda::is_available() ? cuda() : torch::Device(torch::kCPU);
}

void check_model_fits(const ModelConfig& model, torch::Device device) {
  double available = 0;
  if (device.is_cuda()) {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) available = double(total_bytes);
  } else {
    available = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  }
  const model::StateBytes parts = model::training_state_parts(model);
  const double needed = parts.total();
  if (available <= 0 || needed <= available) return;
  // The key of the largest part is the one to name: 2M experts are moe_num_experts' doing,
  // whatever d_model is.
  std::string key, part;
  double largest = 0;
  if (parts.mlp >= parts.attention && parts.mlp >= parts.embedding) {
    largest = parts.mlp;
    part = "the MLPs";
    key = model.block_type == BlockType::Moe ? fmt::format("model.moe_num_experts {}", model.moe_num_experts)
          : model.mlp_hidden_size            ? fmt::format("model.mlp_hidden_size {}", *model.mlp_hidden_size)
                                             : fmt::format("model.mlp_ratio {}", model.mlp_ratio);
  } else if (parts.attention >= parts.embedding) {
    largest = parts.attention;
    part = "attention";
    key = fmt::format("model.d_model {}", model.d_model);
  } else {
    largest = parts.embedding;
    part = "the embeddings";
    key = fmt::format("model.embedding_size {}", model.embedding_size);
  }
  throw Error(
      fmt::format("the model needs {:.3g} GiB for its weights, gradients and AdamW state alone; {} has "
                  "{:.3g} GiB; {} take {:.0f}% of it",
                  needed / double(1 << 30), device.str(), available / double(1 << 30), part,
                  100.0 * largest / needed),
      fmt::format("{} (model.d_model {}, model.n_layers {})", key, model.d_model, model.n_layers),
      "make the model smaller (" + key.substr(0, key.find(' ')) + " first), or shard it over more devices");
}

void install_stop_handlers() {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
}

int stop_signal() { return g_stop_signal.load(); }

AttentionKernelScope::AttentionKernelScope(bool flash_only) : active_(flash_only) {
  auto& ctx = at::globalContext();
  flash_ = ctx.userEnabledFlashSDP();
  mem_efficient_ = ctx.userEnabledMemEfficientSDP();
  cudnn_ = ctx.userEnabledCuDNNSDP();
  math_ = ctx.userEnabledMathSDP();
  if (!active_) return;
  ctx.setSDPUseFlash(true);
  ctx.setSDPUseMemEfficient(false);
  ctx.setSDPUseCuDNN(false);
  ctx.setSDPUseMath(false);
}

AttentionKernelScope::~AttentionKernelScope() {
  if (!active_) return;
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(flash_);
  ctx.setSDPUseMemEfficient(mem_efficient_);
  ctx.setSDPUseCuDNN(cudnn_);
  ctx.setSDPUseMath(math_);
}

void check_flash_attention(const ModelConfig& model, torch::Device device,
                           std::optional<at::ScalarType> autocast) {
  if (!model.flash_attention) return;
  // The shapes and dtype the attention sublayer hands to the kernel (GQA heads are repeated
  // before it); the sequence length does not change the choice.
  const int64_t head_dim = model.d_model / model.n_heads;
  const auto dtype = autocast.value_or(torch::kFloat);
  const auto q = torch::zeros({1, model.n_heads, 16, head_dim}, torch::dtype(dtype).device(device));
  int64_t choice = -1;
  {
    const AttentionKernelScope flash_only(true);
    try {  // with only flash enabled, "no kernel" is an exception
      choice = at::_fused_sdp_choice(q, q, q, {}, model.attention_dropout, /*is_causal=*/true);
    } catch (const c10::Error&) {
    }
  }
  if (choice == static_cast<int64_t>(at::SDPBackend::flash_attention)) return;
  const std::string needs =
      device.is_cuda() ? "on CUDA it needs float16 or bfloat16 (precision amp_bf16 or amp_fp16), a head size "
                         "that is a multiple of 8 up to 256 and an sm80 or newer GPU"
                       : "on the CPU it does not take attention dropout";
  throw Error(fmt::format("model.flash_attention is true, but LibTorch's flash attention kernel "
                          "cannot run this model on {} ({}, head size {}, attention_dropout {}): {}",
                          device.str(), c10::toString(dtype), head_dim, model.attention_dropout, needs),
              "model.flash_attention",
              "set model.flash_attention: false (scaled_dot_product_attention then picks the "
              "fastest kernel that can run it), or change what the kernel needs");
}

}  // namespace siamese::train
