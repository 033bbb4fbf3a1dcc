#include "siamese/dist/buffer_pool.h"

namespace siamese::dist {

BufferPool::Key BufferPool::key_of(int64_t numel, const torch::TensorOptions& options) {
  const auto device = options.device();
  return {numel, int(c10::typeMetaToScalarType(options.dtype())), int(device.type()), int(device.index())};
}

torch::Tensor BufferPool::take(int64_t numel, const torch::TensorOptions& options) {
  auto& kept = free_[key_of(numel, options)];
  if (!kept.empty()) {
    torch::Tensor buffer = std::move(kept.back());
    kept.pop_back();
    return buffer;
  }
  torch::Tensor buffer = torch::empty({numel}, options);
  bytes_ += int64_t(buffer.nbytes());
  return buffer;
}

void BufferPool::give(torch::Tensor& buffer) {
  if (!buffer.defined()) return;
  free_[key_of(buffer.numel(), buffer.options())].push_back(buffer.view({-1}));
  buffer = torch::Tensor();
}

void BufferPool::shrink_to(int64_t bytes) {
  // Most elements first: the fewest buffers freed for the bytes.
  for (auto it = free_.rbegin(); it != free_.rend() && bytes_ > bytes; ++it)
    for (auto& kept = it->second; !kept.empty() && bytes_ > bytes; kept.pop_back())
      bytes_ -= int64_t(kept.back().nbytes());
}

}  // namespace siamese::dist
