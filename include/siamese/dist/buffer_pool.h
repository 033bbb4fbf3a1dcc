#pragma once
// Buffers a sharded step allocates at the same sizes every time (all-gather outputs and
// inputs, reduce-scatter inputs, a FULL_SHARD unit's parameter storage), kept for the next
// use. On the CPU, glibc keeps what such buffers free in pieces that later allocations of
// other sizes cannot reuse, so without reuse a rank's resident memory grows for steps by an
// amount that depends on thread timing. With it, a rank holds the most it ever had in use at
// once, which the memory plan can count.
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace siamese::dist {

class BufferPool {
 public:
  // A 1-d tensor of `numel` elements with `options`; its values are whatever it held last.
  torch::Tensor take(int64_t numel, const torch::TensorOptions& options);
  // Back for the next take() of its size, whole as take() gave it. Only once nothing reads
  // or writes it any more: after the wait of every collective it was given to (Gloo's
  // bookkeeping may hold a reference a while longer, but no longer touches the bytes).
  void give(torch::Tensor& buffer);
  // Frees buffers in the pool's hands until it has allocated at most `bytes`, or none is left.
  void shrink_to(int64_t bytes);
  // Bytes this pool has allocated, in its hands or taken.
  int64_t bytes() const { return bytes_; }

 private:
  using Key = std::tuple<int64_t, int, int, int>;  // elements, dtype, device type, index
  static Key key_of(int64_t numel, const torch::TensorOptions& options);
  std::map<Key, std::vector<torch::Tensor>> free_;
  int64_t bytes_ = 0;
};

}  // namespace siamese::dist
