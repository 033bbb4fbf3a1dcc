// `siamese --version` names the sources' commit and what the binary really links: LibTorch
// 2.11 with CUDA 13, cuDNN and NCCL versions read from the loaded libraries.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <regex>
#include <string>
#include <vector>

#include "siamese/common/build_info.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace {

// What `argv` prints on stdout.
std::string output_of(const std::vector<std::string>& argv) {
  const siamese::testing::TempDir dir;
  siamese::testing::Limits limits;
  limits.err = dir.file("stderr");
  return siamese::testing::run(argv, dir.file("stdout"), limits).output;
}

TEST(BuildInfo, VersionFlagNamesTheCommitAndTheLinkedLibraries) {
  const std::string out = output_of({SIAMESE_BINARY, "--version"});
  const std::string head = output_of({"git", "-C", SIAMESE_SOURCE_DIR, "rev-parse", "--short=12", "HEAD"});
  ASSERT_FALSE(head.empty());
  EXPECT_NE(out.find("siamese: " + head.substr(0, 12)), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("libtorch: ") + TORCH_VERSION), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("cuda \\(compiled\\): 13\\.[0-9]+\n"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("nccl: 2\\.[0-9]+\\.[0-9]+\n"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("cudnn: 9\\.[0-9]+\\.[0-9]+\n"))) << out;
  EXPECT_EQ(out, siamese::build_info_text(siamese::build_info())) << "the flag and the library disagree";
}

TEST(BuildInfo, TheBinaryLinksCudaAndNccl) {
  const std::string ldd = output_of({"ldd", SIAMESE_BINARY});
  for (const char* lib : {"libtorch_cuda.so", "libc10_cuda.so", "libcudart.so.13", "libnccl.so.2"})
    EXPECT_NE(ldd.find(lib), std::string::npos) << lib << " not linked:\n" << ldd;
  EXPECT_EQ(ldd.find("not found"), std::string::npos) << ldd;
}

}  // namespace
