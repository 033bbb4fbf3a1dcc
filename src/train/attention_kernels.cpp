#include "siamese/train/attention_kernels.h"

#include <fmt/format.h>

#include <string>

#include "siamese/common/error.h"

namespace siamese::train {

AttentionKernelScope::AttentionKernelScope(bool flash_only) : active_(flash_only) {
  auto& ctx = at::globalContext();
  flash_ = ctx.userEnabledFlashSDP();
  mem_efficient_ = ctx.userEnabledMemEfficientSDP();
  cudnn_ = ctx.userEnabledCuDNNSDP();
  math_ = ctx.userEnabledMathSDP();
  if (!active_) return;
  ctx.setSDPUseFlash(true);
  ctx.setSDPUseMemEfficient(false);
  ctx.setSDPUseCuDNN(false);
  ctx.setSDPUseMath(false);
}

AttentionKernelScope::~AttentionKernelScope() {
  if (!active_) return;
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(flash_);
  ctx.setSDPUseMemEfficient(mem_efficient_);
  ctx.setSDPUseCuDNN(cudnn_);
  ctx.setSDPUseMath(math_);
}

void check_flash_attention(const config::ModelConfig& model, torch::Device device,
                           std::optional<at::ScalarType> autocast) {
  if (!model.flash_attention) return;
  // The shapes and dtype the attention sublayer hands to the kernel (GQA heads are repeated
  // before it); the sequence length does not change the choice.
  const int64_t head_dim = model.d_model / model.n_heads;
  const auto dtype = autocast.value_or(torch::kFloat);
  const auto q = torch::zeros({1, model.n_heads, 16, head_dim}, torch::dtype(dtype).device(device));
  int64_t choice = -1;
  {
    const AttentionKernelScope flash_only(true);
    try {  // with only flash enabled, "no kernel" is an exception
      choice = at::_fused_sdp_choice(q, q, q, {}, model.attention_dropout, /*is_causal=*/true);
    } catch (const c10::Error&) {
    }
  }
  if (choice == static_cast<int64_t>(at::SDPBackend::flash_attention)) return;
  const std::string needs =
      device.is_cuda() ? "on CUDA it needs float16 or bfloat16 (precision amp_bf16 or amp_fp16), a head size "
                         "that is a multiple of 8 up to 256 and an sm80 or newer GPU"
                       : "on the CPU it does not take attention dropout";
  throw Error(fmt::format("model.flash_attention is true, but LibTorch's flash attention kernel "
                          "cannot run this model on {} ({}, head size {}, attention_dropout {}): {}",
                          device.str(), c10::toString(dtype), head_dim, model.attention_dropout, needs),
              "model.flash_attention",
              "set model.flash_attention: false (scaled_dot_product_attention then picks the "
              "fastest kernel that can run it), or change what the kernel needs");
}

}  // namespace siamese::train
