#pragma once
// Process-wide settings a training or benchmark run applies once at start-up.
#include <torch/torch.h>

#include <optional>
#include <string>

#include "siamese/config/config.h"

namespace siamese::train {

// CPU: one intra-op thread per core (OpenMP reports 1 here by default) and glibc malloc
// told to keep freed memory, since returning the vocabulary-sized buffers to the OS and
// faulting them back in cost ~30% of a step (docs/results.md).
void configure_cpu_runtime();

// OpenMP workers that wait by spinning take the time slices their busy siblings need when
// other processes share the cores (a shared CI runner, a laptop, a login node): libgomp's
// default of 300,000 spins before sleeping made steps up to 10x slower there, while a
// passive wait (sleep at once) cost up to 30% on an idle machine (docs/results.md, "Threads
// on a busy machine"). 10,000 spins keeps the idle speed and most of the passive gain.
// libgomp reads the count once, when it loads before main, so the only way to choose it is
// the environment of a new process image: this re-executes the process (same pid, same argv)
// with GOMP_SPINCOUNT set, unless the user set GOMP_SPINCOUNT or OMP_WAIT_POLICY, or
// OMP_NUM_THREADS=1 leaves nothing to wait. Call first thing in main, before any file,
// thread or socket exists. Returns only when no restart was needed (or exec failed).
inline constexpr const char* kOpenmpSpinCount = "10000";
void restart_with_short_openmp_spin(char** argv);

// CUDA: makes `device` the current one (its RNG is the one checkpoints save) and uses TF32
// tensor cores for fp32 matmuls and cuDNN convolutions when `allow_tf32` (the config's
// allow_tf32; PyTorch leaves matmuls in full fp32 by default).
void configure_cuda_runtime(torch::Device device, bool allow_tf32);

// Refuses (siamese::Error naming the size keys, the bytes needed and the bytes the device
// has) a model whose weights, gradients and optimizer state alone exceed the memory of
// `device`: the process would otherwise grow until the allocator or the kernel kills it.
void check_model_fits(const ModelConfig& model, torch::Device device);

// model.flash_attention: true restricts at::scaled_dot_product_attention to its flash
// kernel (OLMo then calls the flash-attn package) in the training step; false lets it pick
// any kernel, flash included when the inputs allow. Evaluation and generation always let it
// choose: they run float32 and masked passes the flash kernel does not take.
//
// Refuses (siamese::Error, with the reason) a model the flash kernel cannot run on `device`
// with `autocast` (float32 on CUDA, attention dropout on the CPU, a head size it does not
// take) when flash_attention is true; nothing to check otherwise. Call before training.
void check_flash_attention(const ModelConfig& model, torch::Device device,
                           std::optional<at::ScalarType> autocast);

// While alive and `flash_only`, scaled_dot_product_attention may use only its flash kernel
// (process-wide LibTorch flags, restored on destruction). Held around a training step's
// forward and backward, so that recomputation under activation checkpointing uses it too.
class AttentionKernelScope {
 public:
  explicit AttentionKernelScope(bool flash_only);
  ~AttentionKernelScope();
  AttentionKernelScope(const AttentionKernelScope&) = delete;
  AttentionKernelScope& operator=(const AttentionKernelScope&) = delete;

 private:
  bool active_;
  bool flash_, mem_efficient_, cudnn_, math_;
};

// "auto" picks CUDA when available; "cpu", "cuda" and "cuda:N" as given (config/device.h). A
// CUDA device without an index gets `local_rank` (one GPU per rank on a node).
torch::Device resolve_device(const std::string& device, int local_rank = 0);

// Stop requests from SIGTERM / SIGINT (cluster preemption, Ctrl-C): the loop polls
// stop_signal() between steps, saves a checkpoint and exits cleanly.
void install_stop_handlers();
int stop_signal();  // 0 when no signal arrived

}  // namespace siamese::train
