#pragma once
// The peak MFU is measured against when peak_tflops is not set: a table of dense (no 2:4
// sparsity) tensor-core peaks per GPU from NVIDIA's datasheets, by the name CUDA gives the
// device. An unknown device gets no MFU and a line saying how to set one, never a guess.
#include <torch/torch.h>

#include <optional>
#include <string>

#include "siamese/config/config.h"

namespace siamese::train {

// The arithmetic the step's matmuls run in: amp_bf16 bf16, amp_fp16 fp16, fp32 TF32 where
// allow_tf32 lets cuBLAS use it, else plain fp32.
std::string matmul_format(config::Precision precision, bool allow_tf32);

struct DevicePeak {
  std::string card;    // the table's row: "H100 SXM", "A100", ...
  std::string format;  // bf16, fp16, tf32, fp32
  double tflops = 0;   // per GPU
};

// The row whose card `device_name` names ("NVIDIA H100 80GB HBM3" is an H100 SXM; "NVIDIA
// GH200 480GB" is not an H200); nullopt for an unknown device or a format its tensor cores lack.
std::optional<DevicePeak> device_peak(const std::string& device_name, const std::string& format);

// What MFU is reported against: peak_tflops when set, else the table's row for `device`.
// `said` is the start-up line that names it, or says why there is none and how to set one.
struct MfuPeak {
  std::optional<double> tflops;  // per rank
  std::string said;
};
MfuPeak mfu_peak(const std::optional<double>& peak_tflops, torch::Device device, config::Precision precision,
                 bool allow_tf32);

}  // namespace siamese::train
