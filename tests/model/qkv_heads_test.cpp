// The attention's one-pass head preparation (kernels/qkv_heads.h) inside the model. The model
// takes it on CUDA only; here use_fused_heads_on_cpu turns it on for the CPU, so that CI runs
// its autograd node, its layouts and what the attention does with them. The same model, with
// and without it, must give the same logits and every parameter the same gradient: in
// float32 to its rounding, and under a bfloat16 autocast to bfloat16's. pre (RoPE alone) and
// hybrid_pre with weightless per-head RMSNorms and LayerNorms (OLMo-1B's configs), with heads
// of 32 channels, the smallest the kernels take, and grouped-query heads for one of them.
#include <ATen/record_function.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "siamese/common/autocast.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/transformer.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

// aten::split_with_sizes calls while fn runs: the separate path splits qkv in every layer.
int64_t splits(const std::function<void()>& fn) {
  static thread_local int64_t calls = 0;
  calls = 0;
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& f) -> std::unique_ptr<at::ObserverContext> {
        if (std::string(f.name()) == "aten::split_with_sizes") ++calls;
        return nullptr;
      }));
  fn();
  at::removeCallback(handle);
  return calls;
}

double largest(const torch::Tensor& t) { return t.abs().max().item<double>(); }

void expect_same_training(const config::ModelConfig& cfg, bool bf16, double tol, const std::string& label) {
  SCOPED_TRACE(label + (bf16 ? " under bf16 autocast" : " in float32"));
  torch::manual_seed(5);
  Transformer separate(cfg);
  torch::manual_seed(5);
  Transformer fused(cfg);
  fused->use_fused_heads_on_cpu(true);
  torch::manual_seed(6);
  const auto ids = torch::randint(0, cfg.vocab_size, {3, cfg.max_sequence_length});
  torch::Tensor logits[2];
  int64_t split_calls[2];
  Transformer* models[2] = {&separate, &fused};
  for (int i = 0; i < 2; ++i) {
    std::optional<AutocastGuard> amp;
    if (bf16) amp.emplace(torch::kCPU, torch::kBFloat16);
    split_calls[i] = splits([&] {
      logits[i] = (*models[i])->forward(ids).to(torch::kFloat);
      next_token_nll_sum(logits[i], ids).backward();
    });
  }
  EXPECT_LT(split_calls[1], split_calls[0]) << "the fused path did not run";
  const double scale = std::max(1.0, largest(logits[0]));
  EXPECT_LE(largest(logits[1] - logits[0]), tol * scale);
  const auto ps = separate->named_parameters(), pf = fused->named_parameters();
  for (const auto& kv : ps) {
    ASSERT_TRUE(kv.value().grad().defined()) << kv.key();
    const auto g = kv.value().grad(), h = pf[kv.key()].grad();
    EXPECT_LE(largest(h - g), tol * std::max(1e-3, largest(g))) << kv.key();
  }
}

TEST(QkvHeads, TheFusedHeadPreparationTrainsAsTheSeparateNormsAndRope) {
  for (const std::string topology : {"pre", "hybrid_pre"})
    for (const auto norm : {config::LayerNormType::RMS, config::LayerNormType::Default}) {
      auto cfg = siamese::testing::tiny_model(topology, {64, 2, 2, 100, 128, 32});
      cfg.rope = true;
      cfg.include_bias = false;
      cfg.layer_norm_type = norm;
      cfg.layer_norm_with_affine = cfg.attention_layer_norm_with_affine = false;
      if (norm == config::LayerNormType::Default) cfg.n_kv_heads = 1;
      const std::string label = topology + (norm == config::LayerNormType::RMS ? " rms" : " layer_norm");
      // float32: the paths differ only in the order of the norms' sums over 32 values, a few
      // ulps (1.2e-7 each) per head row, carried through two layers: 1e-5 leaves room for 80.
      // bf16: the fused path rounds q and k once where the separate one rounds twice (RMSNorm)
      // or hands float32 to attention (LayerNorm), so a head value differs by up to one bf16
      // ulp (2^-8 = 3.9e-3 relative); the products of attention and of the next layer each
      // round again. 3e-2 is eight such ulps over two layers.
      expect_same_training(cfg, false, 1e-5, label);
      expect_same_training(cfg, true, 3e-2, label);
    }
}

}  // namespace
}  // namespace siamese::model
