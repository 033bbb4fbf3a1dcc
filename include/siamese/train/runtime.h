#pragma once
// Process-wide settings a training or benchmark run applies once at start-up.
#include <torch/torch.h>

#include <string>

namespace siamese::train {

// CPU: one intra-op thread per core (OpenMP reports 1 here by default) and glibc malloc
// told to keep freed memory, since returning the vocabulary-sized buffers to the OS and
// faulting them back in cost ~30% of a step (docs/results.md).
void configure_cpu_runtime();

// CUDA: makes `device` the current one (its RNG is the one checkpoints save) and uses TF32
// tensor cores for fp32 matmuls and cuDNN convolutions when `allow_tf32` (the config's
// allow_tf32; PyTorch leaves matmuls in full fp32 by default).
void configure_cuda_runtime(torch::Device device, bool allow_tf32);

// "auto" picks CUDA when available; "cpu" / "cuda" as given. A CUDA device gets index
// `local_rank` (one GPU per rank on a node).
torch::Device resolve_device(const std::string& device, int local_rank = 0);

// Stop requests from SIGTERM / SIGINT (cluster preemption, Ctrl-C): the loop polls
// stop_signal() between steps, saves a checkpoint and exits cleanly.
void install_stop_handlers();
int stop_signal();  // 0 when no signal arrived

}  // namespace siamese::train
