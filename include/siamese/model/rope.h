#pragma once
// Rotary position embeddings in OLMo's form (GPT-NeoX "rotate half", non-interleaved;
// Su et al. 2021, arXiv 2104.09864): inv_freq = theta^(-2i/hd), angles = pos x inv_freq,
// emb = [angles, angles], t' = t*cos(emb) + rotate_half(t)*sin(emb), rotate_half(t) =
// [-t2, t1]. Angles are computed in float32 as OLMo does.
#include <torch/torch.h>

#include <vector>

namespace siamese::model {

class Rope {
 public:
  Rope(int64_t head_dim, double theta, bool full_precision);

  // q: [B, H, T, hd], k: [B, Hkv, T, hd] at positions offset..offset+T-1 (offset > 0 when
  // earlier positions sit in a KV cache); returns the rotated pair in the inputs' dtype
  // (rotated in float32 when full_precision and inputs are half).
  std::pair<torch::Tensor, torch::Tensor> apply(const torch::Tensor& q, const torch::Tensor& k,
                                                int64_t offset = 0);
  // The same at per-token positions [B, T] (int64, each below T): positions restarted at
  // every document of a packed row (documents.h).
  std::pair<torch::Tensor, torch::Tensor> apply(const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& positions);
  // sin and cos of the [T, hd / 2] angles (each used by both halves), float32, cached for the
  // longest T seen on this device.
  std::pair<torch::Tensor, torch::Tensor> tables(int64_t T, const torch::Device& device);
  // Half inputs are rotated in float32.
  bool full_precision() const { return full_precision_; }

 private:
  // q and k rotated by angles sin, cos broadcast against them.
  std::pair<torch::Tensor, torch::Tensor> rotate(const torch::Tensor& q, const torch::Tensor& k,
                                                 torch::Tensor sin, torch::Tensor cos) const;

  int64_t head_dim_;
  double theta_;
  bool full_precision_;
  torch::Tensor sin_, cos_;
  std::vector<torch::Tensor> retired_;  // earlier, shorter tables: kept alive while the module lives
};

}  // namespace siamese::model
