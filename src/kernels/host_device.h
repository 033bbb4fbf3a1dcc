#pragma once
// SIAMESE_HD marks a function that both backends compile: host and device code under nvcc,
// plain host code elsewhere. The maths headers (fused_norm_math.h, swiglu_math.h) use it so
// that the CPU loops and the CUDA kernels run the same arithmetic.
#if defined(__CUDACC__)
#define SIAMESE_HD __host__ __device__
#else
#define SIAMESE_HD
#endif
