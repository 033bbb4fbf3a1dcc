#include "siamese/train/device_peaks.h"

#include <ATen/cuda/CUDAContext.h>
#include <fmt/format.h>

#include <cctype>
#include <vector>

namespace siamese::train {
namespace {

// Dense TFLOP/s per GPU (NVIDIA's datasheets halve their sparse figures for these); 0 where
// the card has no tensor cores for the format. First match wins, so a card's variants come
// before its plain name.
struct Row {
  const char* name;  // as it appears in the CUDA device name
  const char* card;
  double bf16, fp16, tf32, fp32;
};
const std::vector<Row> kRows = {
    {"B200", "B200", 2250, 2250, 1125, 75},  // HGX B200
    {"GH200", "GH200", 989.4, 989.4, 494.7, 66.9},
    {"H200 NVL", "H200 NVL", 835.5, 835.5, 417.5, 60},
    {"H200", "H200 SXM", 989.4, 989.4, 494.7, 66.9},
    {"H100 NVL", "H100 NVL", 835.5, 835.5, 417.5, 60},
    {"H100 PCIe", "H100 PCIe", 756.5, 756.5, 378, 51.2},
    {"H100", "H100 SXM", 989.4, 989.4, 494.7, 66.9},
    {"A100", "A100", 312, 312, 156, 19.5},
    {"L40S", "L40S", 362.05, 362.05, 183, 91.6},
    {"L40", "L40", 181.05, 181.05, 90.5, 90.5},
    {"L4", "L4", 121, 121, 60, 30.3},
    {"A10", "A10", 125, 125, 62.5, 31.2},
    {"V100", "V100", 0, 125, 0, 15.7},
};

// `word` in `text` as whole words: "H200" is not in "GH200", nor "L40" in "L40S".
bool names(const std::string& text, const std::string& word) {
  const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const size_t end = at + word.size();
    if ((at == 0 || !alnum(text[at - 1])) && (end == text.size() || !alnum(text[end]))) return true;
  }
  return false;
}

}  // namespace

std::string matmul_format(config::Precision precision, bool allow_tf32) {
  switch (precision) {
    case config::Precision::AmpBf16:
      return "bf16";
    case config::Precision::AmpFp16:
      return "fp16";
    case config::Precision::Fp32:
      break;
  }
  return allow_tf32 ? "tf32" : "fp32";
}

std::optional<DevicePeak> device_peak(const std::string& device_name, const std::string& format) {
  for (const Row& r : kRows) {
    if (!names(device_name, r.name)) continue;
    const double tflops = format == "bf16"   ? r.bf16
                          : format == "fp16" ? r.fp16
                          : format == "tf32" ? r.tf32
                                             : r.fp32;
    if (tflops <= 0) return std::nullopt;
    return DevicePeak{r.card, format, tflops};
  }
  return std::nullopt;
}

MfuPeak mfu_peak(const std::optional<double>& peak_tflops, torch::Device device, config::Precision precision,
                 bool allow_tf32) {
  if (peak_tflops)
    return {peak_tflops, fmt::format("MFU against peak_tflops {} TFLOP/s per rank", *peak_tflops)};
  if (!device.is_cuda())
    return {std::nullopt,
            "MFU not reported: there is no peak table for CPUs; set peak_tflops (TFLOP/s per rank) to report "
            "one"};
  const std::string name = at::cuda::getDeviceProperties(device.index())->name;
  const std::string format = matmul_format(precision, allow_tf32);
  if (const auto row = device_peak(name, format))
    return {row->tflops, fmt::format("MFU against {}'s dense {} peak, {} TFLOP/s per GPU ({} in the table of "
                                     "NVIDIA's datasheets; peak_tflops overrides it)",
                                     name, format, row->tflops, row->card)};
  return {std::nullopt, fmt::format("MFU not reported: no dense {} peak is known for {}; set peak_tflops "
                                    "(TFLOP/s per GPU, from its datasheet) to report one",
                                    format, name)};
}

}  // namespace siamese::train
