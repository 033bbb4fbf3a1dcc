// Sliding-window attention (model.sliding_window_pattern; OLMo-3's three sliding layers to one
// full): every path a window takes (band mask, blocks of queries, documents, a padded KV
// cache) computes what the plain reference does, for every topology, and a reordered model
// with full-width QK norms computes what transformers' Olmo3ForCausalLM does on its weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "siamese/common/npy.h"
#include "siamese/model/attention.h"
#include "siamese/model/documents.h"
#include "siamese/model/mlp.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "support/python_reference.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

config::ModelConfig windowed(const std::string& residual, std::vector<int64_t> pattern, int64_t layers = 3) {
  auto c = siamese::testing::tiny_model(residual, {32, 4, layers, 50, 64, 64});
  c.rope = true;
  c.n_kv_heads = 2;
  c.sliding_window_pattern = std::move(pattern);
  return c;
}

Transformer build(const config::ModelConfig& c, torch::Dtype dtype = torch::kDouble) {
  torch::manual_seed(0);
  Transformer m(c);
  m->to(dtype);
  m->eval();
  return m;
}

double max_rel(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(1.0, want.abs().max().item<double>());
}

TEST(SlidingWindow, PatternRepeatsOverLayersAndMinusOneIsFull) {
  auto c = windowed("pre", {3, 3, 3, -1}, 8);
  const std::vector<std::optional<int64_t>> want = {3, 3, 3, std::nullopt, 3, 3, 3, std::nullopt};
  for (int64_t l = 0; l < 8; ++l) EXPECT_EQ(attention_window(c, l), want[size_t(l)]) << l;
  c.sliding_window_pattern.clear();
  EXPECT_EQ(attention_window(c, 5), std::nullopt);
}

// One attention module, float64: the library path (SDPA with a band mask for T <= 2w, blocks
// of w queries beyond) against reference_attention's plain masked softmax, in value and in the
// gradients of the input and the projections. Both are exact up to float64 rounding of sums
// of ~T terms, so 1e-12 relative holds with a wide margin.
TEST(SlidingWindow, EveryKernelPathMatchesTheReferenceInValueAndGradient) {
  const auto c = windowed("pre", {});
  const int64_t T = 12;
  for (int64_t w : {1, 2, 5, 6, 12, 30}) {
    SCOPED_TRACE("window " + std::to_string(w));
    torch::manual_seed(1);
    Attention attn(c, SublayerHooks{}, w);
    attn->to(torch::kDouble);
    const auto x = torch::randn({2, T, c.d_model}, torch::kDouble);
    const auto g = torch::randn({2, T, c.d_model}, torch::kDouble);
    auto run = [&](bool reference) {
      attn->use_reference_kernel(reference);
      attn->zero_grad();
      const auto xi = x.clone().requires_grad_();
      const auto y = attn(xi);
      (y * g).sum().backward();
      return std::vector<torch::Tensor>{y.detach(), xi.grad(), attn->att_proj->weight.grad().clone()};
    };
    const auto lib = run(false), ref = run(true);
    for (size_t i = 0; i < lib.size(); ++i) EXPECT_LT(max_rel(lib[i], ref[i]), 1e-12) << i;
  }
}

// A window as long as the row is full causal attention; a shorter one changes the output.
TEST(SlidingWindow, WindowOfTheWholeRowIsFullAttention) {
  const auto c = windowed("pre", {});
  torch::NoGradGuard no_grad;
  // The same seed before each: the same projections.
  auto make = [&](std::optional<int64_t> w) {
    torch::manual_seed(1);
    Attention a(c, SublayerHooks{}, w);
    a->to(torch::kDouble);
    return a;
  };
  auto full = make(std::nullopt), whole = make(10), short_window = make(4);
  const auto x = torch::randn({2, 10, c.d_model}, torch::kDouble);
  EXPECT_LT(max_rel(whole(x), full(x)), 1e-13);
  EXPECT_GT(max_rel(short_window(x), full(x)), 1e-3);
}

// Every topology with sliding and full layers: library kernels against the reference, on the
// logits and every parameter's gradient (float64). Rows of 16 run the blocked path for the
// window of 3 and the band mask for the window of 9.
class WindowedTopology : public ::testing::TestWithParam<std::string> {};

TEST_P(WindowedTopology, ModelMatchesTheReferenceKernelInValueAndGradient) {
  auto m = build(windowed(GetParam(), {3, -1, 9}));
  torch::manual_seed(4);
  const auto ids = torch::randint(50, {2, 16}, torch::kLong);
  auto run = [&](bool reference) {
    m->use_reference_attention(reference);
    m->zero_grad();
    const auto logits = m->forward(ids);
    torch::manual_seed(5);
    (logits * torch::randn_like(logits)).sum().backward();
    std::map<std::string, torch::Tensor> out = {{"logits", logits.detach()}};
    for (const auto& p : m->named_parameters())
      if (p.value().grad().defined()) out[p.key()] = p.value().grad().clone();
    return out;
  };
  const auto lib = run(false), ref = run(true);
  ASSERT_EQ(lib.size(), ref.size());
  for (const auto& [name, t] : ref) EXPECT_LT(max_rel(lib.at(name), t), 1e-10) << name;
}

INSTANTIATE_TEST_SUITE_P(SlidingWindow, WindowedTopology, ::testing::ValuesIn(topology_names()));
INSTANTIATE_TEST_SUITE_P(SiameseCouplings, WindowedTopology,
                         ::testing::ValuesIn(siamese::testing::kSiameseCouplings));

// Packed documents under a window: each document's logits are those of the document run alone
// (RoPE restarting per document), so the window counts positions inside the document.
TEST(SlidingWindow, DocumentsAndWindowsCompose) {
  auto c = windowed("hybrid_pre", {3, -1, 5});
  const int64_t eos = 7;
  c.eos_token_id = eos;
  auto m = build(c);
  torch::NoGradGuard no_grad;
  const std::vector<std::vector<int64_t>> docs = {
      {4, 9, 11, 3, 20, 31, 2, 8, eos}, {5, 6, eos}, {12, 13, 14, 15, 16, 17, 18, 19, 21, 22, 23}};
  std::vector<int64_t> row;
  for (const auto& d : docs) row.insert(row.end(), d.begin(), d.end());
  const auto ids = torch::tensor(row).unsqueeze(0);
  const Documents found = find_documents(ids, eos, /*restart_positions=*/true);
  ForwardOptions opts;
  opts.documents = &found;
  const auto packed = m->forward(ids, opts);
  int64_t at = 0;
  for (const auto& d : docs) {
    const int64_t n = int64_t(d.size());
    const auto alone = m->forward(torch::tensor(d).unsqueeze(0));
    EXPECT_LT(max_rel(packed.narrow(1, at, n), alone), 1e-12) << "document at " << at;
    at += n;
  }
}

// A KV cache over a batch left-padded to one length (downstream evaluation): the sliding
// layers keep a ring of w - 1 positions, and the padded row's logits, prefilled then decoded
// one token at a time past several turns of the ring, are those of its tokens run alone.
// RoPE is relative, but its float32 sin/cos tables round differently at the positions the
// padding shifts to (2^-24 relative, ~6e-8): 1e-6 of the largest logit bounds that, while a
// padding key read or a window off by one moves logits by their own size.
TEST(SlidingWindow, PaddedCacheOfWindowSizeGivesTheLogitsOfTheRowAlone) {
  auto m = build(windowed("pre", {3, -1, 4}));
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  const int64_t pad = 3, prompt = 5, total = 17;
  const auto tokens = torch::randint(50, {1, total}, torch::kLong);
  const auto alone = m->forward(tokens);
  auto padded = torch::zeros({2, pad + total}, torch::kLong);
  padded[0].narrow(0, pad, total).copy_(tokens[0]);
  padded[1].copy_(torch::randint(50, {pad + total}, torch::kLong));
  auto valid = torch::ones({2, pad + total}, torch::kBool);
  valid[0].narrow(0, 0, pad).fill_(false);
  KvCache cache(3, pad + total);
  cache.set_keys_valid(valid);
  ForwardOptions opts;
  opts.cache = &cache;
  std::vector<torch::Tensor> parts = {
      m->forward(padded.narrow(1, 0, pad + prompt), opts).narrow(1, pad, prompt)};
  for (int64_t t = pad + prompt; t < pad + total; ++t)
    parts.push_back(m->forward(padded.narrow(1, t, 1), opts));
  EXPECT_EQ(cache.layers[0].k.size(2), 2);  // window 3: the last two positions
  EXPECT_EQ(cache.layers[1].k.size(2), pad + total);
  EXPECT_EQ(cache.layers[2].k.size(2), 3);
  EXPECT_LT(max_rel(torch::cat(parts, 1).narrow(0, 0, 1), alone), 1e-6);
}

// transformers' Olmo3ForCausalLM (eager attention, its layer_types and sliding_window) on a
// reordered model's weights with full-width QK norms: logits and every parameter's gradient
// of sum(logits * g), float64 and float32, rows longer than twice the window (the blocked
// path) and shorter (the band mask). float32 rounding of a few layers of ~1e-7 relative
// steps stays below 1e-5 of the largest value.
TEST(SlidingWindowReference, MatchesTransformersOlmo3InValueAndGradient) {
  struct Case {
    int64_t window, T;
    torch::Dtype dtype;
    double tolerance;
  };
  const std::vector<Case> cases = {
      {4, 19, torch::kDouble, 1e-10}, {8, 12, torch::kDouble, 1e-10}, {4, 19, torch::kFloat, 1e-5}};
  siamese::testing::TempDir dir;
  std::string folders;
  std::vector<siamese::testing::NamedResults> ours;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& cs = cases[k];
    const std::string folder = siamese::testing::new_case_folder(dir, k, folders);
    auto c = windowed("reordered", {cs.window, cs.window, cs.window, -1}, 4);
    c.layer_norm_type = config::LayerNormType::RMS;
    c.include_bias = false;
    c.attention_layer_norm = true;
    c.weight_tying = false;
    auto m = build(c, cs.dtype);
    torch::manual_seed(int64_t(k));
    // Norm weights away from 1, so that a norm read from the wrong place shows.
    {
      torch::NoGradGuard no_grad;
      for (auto& p : m->parameters())
        if (p.dim() == 1) p.uniform_(0.5, 1.5);
    }
    const auto ids = torch::randint(50, {2, cs.T}, torch::kLong);
    const auto logits = m->forward(ids);
    const auto g = torch::randn_like(logits);
    (logits * g).sum().backward();
    write_npy(folder + "/ids.npy", ids);
    write_npy(folder + "/g.npy", g);
    nlohmann::json names = nlohmann::json::array();
    siamese::testing::NamedResults results = {{"logits", logits}};
    for (const auto& p : m->named_parameters()) {
      write_npy(folder + "/" + p.key() + ".npy", p.value().detach());
      names.push_back(p.key());
      results.emplace_back("grad_" + p.key(), p.value().grad());
    }
    nlohmann::json types = nlohmann::json::array();
    for (int64_t l = 0; l < c.n_layers; ++l)
      types.push_back(attention_window(c, l) ? "sliding_attention" : "full_attention");
    const int64_t head = c.d_model / c.n_heads;
    std::ofstream(folder + "/case.json") << nlohmann::json{
        {"params", names},
        {"d_model", c.d_model},
        {"kv_width", kv_head_count(c) * head},
        {"inner", mlp_inner_size(c)},
        {"embedding_size", c.embedding_size},
        {"n_layers", c.n_layers},
        {"n_heads", c.n_heads},
        {"n_kv_heads", kv_head_count(c)},
        {"max_sequence_length", c.max_sequence_length},
        {"eps", c.layer_norm_eps},
        {"sliding_window", cs.window},
        {"layer_types", types},
        {"rope_theta", c.rope_theta}}.dump();
    ours.push_back(results);
  }
  ASSERT_TRUE(
      siamese::testing::reference_ran("tests/model/olmo3_reference.py", folders, dir.file("log.txt")));
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE("case " + std::to_string(k));
    siamese::testing::expect_matches_reference(dir.file("case" + std::to_string(k)), ours[k],
                                               cases[k].tolerance);
  }
}

// On CUDA in bf16 a sliding layer runs LibTorch's flash kernel with its left window: dense
// rows, and packed documents through the variable-length kernel. Logits and gradients follow
// the float32 masked path to bf16 precision (ctest label gpu; skips without a CUDA device).
TEST(GpuSlidingWindow, FlashKernelsWithAWindowFollowTheFloat32Path) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the flash kernel needs a GPU";
  auto c = windowed("hybrid_pre", {5, -1, 9});
  c.eos_token_id = 7;
  torch::manual_seed(8);
  const auto ids = torch::randint(50, {2, 40}, torch::kLong).to(torch::kCUDA);
  const Documents docs = find_documents(ids, c.eos_token_id, true);
  for (const bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "documents (varlen flash)" : "rows (dense flash)");
    auto full = build(c, torch::kFloat), half = build(c, torch::kBFloat16);
    full->to(torch::kCUDA);
    half->to(torch::kCUDA);
    ForwardOptions opts;
    if (packed) opts.documents = &docs;
    const auto want = full->forward(ids, opts);
    const auto got = half->forward(ids, opts).to(torch::kFloat);
    EXPECT_LT(max_rel(got, want), 5e-2);
    const auto weights = torch::randn(want.sizes(), want.options());
    (want * weights).sum().backward();
    (got * weights).sum().backward();
    // In norm over all parameters: bf16 rounds every weight, activation and gradient by
    // ~0.4%, and a wrong window moves them by their whole size.
    double err = 0, norm = 0;
    const auto halves = half->named_parameters();
    for (const auto& p : full->named_parameters()) {
      const auto& g = p.value().grad();
      err += (halves[p.key()].grad().to(torch::kFloat) - g).pow(2).sum().item<double>();
      norm += g.pow(2).sum().item<double>();
    }
    EXPECT_LT(std::sqrt(err / norm), 0.1);
  }
}

}  // namespace
}  // namespace siamese::model
