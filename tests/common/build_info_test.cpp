// `siamese --version` names the sources' commit and what the binary really links: LibTorch
// 2.11 with CUDA 13, cuDNN and NCCL versions read from the loaded libraries.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <array>
#include <cstdio>
#include <memory>
#include <regex>
#include <string>

#include "siamese/common/build_info.h"

namespace {

std::string output_of(const std::string& cmd) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::array<char, 256> buf{};
  while (pipe && fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
  return out;
}

TEST(BuildInfo, VersionFlagNamesTheCommitAndTheLinkedLibraries) {
  const std::string out = output_of(std::string(SIAMESE_BINARY) + " --version");
  const std::string head =
      output_of("git -C " + std::string(SIAMESE_SOURCE_DIR) + " rev-parse --short=12 HEAD");
  ASSERT_FALSE(head.empty());
  EXPECT_NE(out.find("siamese: " + head.substr(0, 12)), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("libtorch: ") + TORCH_VERSION), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("cuda \\(compiled\\): 13\\.[0-9]+\n"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("nccl: 2\\.[0-9]+\\.[0-9]+\n"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("cudnn: 9\\.[0-9]+\\.[0-9]+\n"))) << out;
  EXPECT_EQ(out, siamese::build_info_text(siamese::build_info())) << "the flag and the library disagree";
}

TEST(BuildInfo, TheBinaryLinksCudaAndNccl) {
  const std::string ldd = output_of("ldd " + std::string(SIAMESE_BINARY));
  for (const char* lib : {"libtorch_cuda.so", "libc10_cuda.so", "libcudart.so.13", "libnccl.so.2"})
    EXPECT_NE(ldd.find(lib), std::string::npos) << lib << " not linked:\n" << ldd;
  EXPECT_EQ(ldd.find("not found"), std::string::npos) << ldd;
}

}  // namespace
