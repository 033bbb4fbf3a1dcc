// model.flash_attention: true keeps scaled_dot_product_attention on its flash kernel during a
// training step (and only then) and refuses, with the reason, a model that kernel cannot run.
#include <gtest/gtest.h>

#include "siamese/common/error.h"
#include "siamese/model/attention.h"
#include "siamese/train/attention_kernels.h"

using namespace siamese;

namespace {

config::ModelConfig small_model() {
  config::ModelConfig m;
  m.d_model = 32;
  m.n_heads = 2;
  m.attention_dropout = 0;
  m.flash_attention = true;
  return m;
}

bool only_flash_enabled() {
  auto& ctx = at::globalContext();
  return ctx.userEnabledFlashSDP() && !ctx.userEnabledMathSDP() && !ctx.userEnabledMemEfficientSDP() &&
         !ctx.userEnabledCuDNNSDP();
}

}  // namespace

TEST(AttentionKernels, FlashOnlyScopeRunsTheFlashKernelWithTheReferenceResultThenRestores) {
  EXPECT_NO_THROW(train::check_flash_attention(small_model(), torch::kCPU, std::nullopt));
  EXPECT_TRUE(at::globalContext().userEnabledMathSDP());  // the check leaves the flags alone
  torch::manual_seed(0);
  auto q = torch::randn({2, 2, 24, 16}), k = torch::randn({2, 2, 24, 16}), v = torch::randn({2, 2, 24, 16});
  {
    const train::AttentionKernelScope scope(true);
    EXPECT_TRUE(only_flash_enabled());
    EXPECT_EQ(at::_fused_sdp_choice(q, k, v, {}, 0.0, true), int64_t(at::SDPBackend::flash_attention));
    auto fused = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
    auto reference = model::reference_attention(q, k, v, 0.0, /*training=*/false);
    EXPECT_LT((fused - reference).abs().max().item<double>(), 1e-5);
    // What flash does not take (dropout on the CPU) has no kernel inside the scope.
    EXPECT_THROW(at::scaled_dot_product_attention(q, k, v, {}, 0.5, true), c10::Error);
  }
  EXPECT_TRUE(at::globalContext().userEnabledMathSDP());
  EXPECT_NO_THROW(at::scaled_dot_product_attention(q, k, v, {}, 0.5, true));
  {
    const train::AttentionKernelScope off(false);
    EXPECT_TRUE(at::globalContext().userEnabledMathSDP());
  }
}

TEST(AttentionKernels, AModelTheFlashKernelCannotRunIsRefusedWithTheReason) {
  config::ModelConfig m = small_model();
  m.attention_dropout = 0.1;  // the CPU flash kernel takes no dropout
  try {
    train::check_flash_attention(m, torch::kCPU, std::nullopt);
    FAIL() << "accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part :
         {"model.flash_attention", "attention_dropout 0.1", "on the CPU it does not take attention dropout",
          "set model.flash_attention: false"})
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in " << msg;
  }
  EXPECT_TRUE(at::globalContext().userEnabledMathSDP());  // left as it was for everything else
  m.flash_attention = false;
  EXPECT_NO_THROW(train::check_flash_attention(m, torch::kCPU, std::nullopt));
}
