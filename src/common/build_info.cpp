#include "siamese/common/build_info.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "siamese/git_version.h"

namespace siamese {
namespace {

// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version_string(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

}  // namespace

BuildInfo build_info() {
  BuildInfo b;
  b.git_commit = SIAMESE_GIT_COMMIT;
  b.torch = TORCH_VERSION;
  b.cuda_compiled = cuda_version_string(CUDART_VERSION);
  int runtime = 0;
  b.cuda_runtime =
      cudaRuntimeGetVersion(&runtime) == cudaSuccess ? cuda_version_string(runtime) : "unavailable";
  const long cudnn = at::detail::getCUDAHooks().versionCuDNN();
  b.cudnn = fmt::format("{}.{}.{}", cudnn / 10000, cudnn / 100 % 100, cudnn % 100);
  int nccl = 0;
  b.nccl = ncclGetVersion(&nccl) == ncclSuccess
               ? fmt::format("{}.{}.{}", nccl / 10000, nccl / 100 % 100, nccl % 100)
               : "unavailable";
  b.cuda_devices = static_cast<int>(torch::cuda::device_count());
  return b;
}

std::string build_info_text(const BuildInfo& b) {
  return fmt::format(
      "siamese: {}\nlibtorch: {}\ncuda (compiled): {}\ncuda (runtime): {}\ncudnn: {}\nnccl: {}\n"
      "cuda_devices: {}\n",
      b.git_commit, b.torch, b.cuda_compiled, b.cuda_runtime, b.cudnn, b.nccl, b.cuda_devices);
}

}  // namespace siamese
