#pragma once
// The storage types the raw-pointer seams (fused_norm_kernels.h, rope_kernel.h) name, without
// LibTorch, so nvcc compiles the kernels without its headers. Each backend rejects the ones
// it has no code for.

namespace siamese::kernels {

enum class DType { Float32, Float64, BFloat16, Float16 };

}  // namespace siamese::kernels
