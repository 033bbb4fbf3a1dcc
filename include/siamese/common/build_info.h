#pragma once
// What this binary is and was built against: the git commit of its sources (with -dirty for
// uncommitted changes), LibTorch, CUDA, cuDNN and NCCL versions, and the CUDA devices it sees.
// `siamese --version` prints it; runs record it.
#include <string>

namespace siamese {

struct BuildInfo {
  std::string git_commit;
  std::string torch;
  std::string cuda_compiled;  // the toolkit the binary was compiled with
  std::string cuda_runtime;   // the runtime library loaded now
  std::string cudnn;
  std::string nccl;
  int cuda_devices = 0;
};

BuildInfo build_info();

// One "key: value" line per field.
std::string build_info_text(const BuildInfo& info);

}  // namespace siamese
