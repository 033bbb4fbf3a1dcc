// The peak table MFU falls back on (train/device_peaks.h): names as CUDA reports them pick
// their card's row, variants before the plain name, whole words only; unknown names, and
// formats a card lacks, get none.
#include <gtest/gtest.h>

#include "siamese/train/device_peaks.h"

namespace siamese::train {

TEST(DevicePeaks, CudaNamesPickTheirCardsDenseRow) {
  struct Case {
    const char* name;
    const char* format;
    const char* card;
    double tflops;
  };
  for (const Case& c : std::vector<Case>{{"NVIDIA H100 80GB HBM3", "bf16", "H100 SXM", 989.4},
                                         {"NVIDIA H100 PCIe", "bf16", "H100 PCIe", 756.5},
                                         {"NVIDIA H100 NVL", "fp16", "H100 NVL", 835.5},
                                         {"NVIDIA H200", "bf16", "H200 SXM", 989.4},
                                         {"NVIDIA H200 NVL", "tf32", "H200 NVL", 417.5},
                                         {"NVIDIA GH200 480GB", "bf16", "GH200", 989.4},
                                         {"NVIDIA A100-SXM4-80GB", "bf16", "A100", 312},
                                         {"NVIDIA A100 80GB PCIe", "tf32", "A100", 156},
                                         {"NVIDIA A10", "fp32", "A10", 31.2},
                                         {"NVIDIA L40S", "bf16", "L40S", 362.05},
                                         {"NVIDIA L40", "bf16", "L40", 181.05},
                                         {"NVIDIA L4", "fp16", "L4", 121},
                                         {"NVIDIA B200", "bf16", "B200", 2250},
                                         {"Tesla V100-SXM2-32GB", "fp16", "V100", 125}}) {
    SCOPED_TRACE(c.name);
    const auto peak = device_peak(c.name, c.format);
    ASSERT_TRUE(peak.has_value());
    EXPECT_EQ(peak->card, c.card);
    EXPECT_EQ(peak->format, c.format);
    EXPECT_DOUBLE_EQ(peak->tflops, c.tflops);
  }
  EXPECT_FALSE(device_peak("Tesla V100-SXM2-32GB", "bf16"));  // no bf16 tensor cores
  EXPECT_FALSE(device_peak("NVIDIA RTX A1000", "bf16"));      // not an A10
  EXPECT_FALSE(device_peak("NVIDIA GeForce RTX 5090", "bf16"));
}

TEST(DevicePeaks, TheFormatIsTheMatmulsAndAConfiguredPeakWins) {
  EXPECT_EQ(matmul_format(config::Precision::AmpBf16, true), "bf16");
  EXPECT_EQ(matmul_format(config::Precision::AmpFp16, false), "fp16");
  EXPECT_EQ(matmul_format(config::Precision::Fp32, true), "tf32");
  EXPECT_EQ(matmul_format(config::Precision::Fp32, false), "fp32");
  const MfuPeak set = mfu_peak(123.0, torch::kCPU, config::Precision::Fp32, true);
  EXPECT_EQ(set.tflops, 123.0);
  const MfuPeak cpu = mfu_peak(std::nullopt, torch::kCPU, config::Precision::Fp32, true);
  EXPECT_FALSE(cpu.tflops);
  EXPECT_NE(cpu.said.find("set peak_tflops"), std::string::npos) << cpu.said;
}

}  // namespace siamese::train
