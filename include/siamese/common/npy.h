#pragma once
// NumPy .npy files (format 1.0-3.0), for golden tensors and exported arrays: float32,
// float64, int32 and int64, little-endian, C order. Anything else is a siamese::Error
// naming the file and its header, never a silent reinterpretation.
#include <torch/torch.h>

#include <string>

namespace siamese {

torch::Tensor read_npy(const std::string& path);

// Writes a CPU copy of `t` (contiguous, C order) in format 1.0; the dtype must be one of
// the four above.
void write_npy(const std::string& path, const torch::Tensor& t);

}  // namespace siamese
