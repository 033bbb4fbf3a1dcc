#pragma once
// The process's runtime, set once at start-up by the commands that run models: threads and
// the allocator on the CPU, OpenMP's spin, the CUDA device and TF32, and which device a rank
// runs on. Refusals before allocation live with what they check (memory_plan.h,
// attention_kernels.h); stop signals with the stop policy (stop_policy.h).
#include <torch/torch.h>

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

// "auto" picks CUDA when available; "cpu", "cuda" and "cuda:N" as given (config/device.h). A
// CUDA device without an index gets `local_rank` (one GPU per rank on a node).
torch::Device resolve_device(const config::DeviceSetting& setting, int local_rank = 0);

// `device: auto` takes the CPU where no GPU is visible, which a small model trains on in
// minutes and OLMo-1B (1.18B parameters) in weeks. Above kCpuFallbackParameters parameters
// that silent fallback is refused, naming the key: `device: cpu` asks for the CPU knowingly.
inline constexpr double kCpuFallbackParameters = 2.5e8;
void check_device_choice(const config::DeviceSetting& setting, const config::ModelConfig& model,
                         torch::Device device);

}  // namespace siamese::train
