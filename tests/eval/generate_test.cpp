// Generation: the KV cache changes the cost, never the result. For every topology, cached
// greedy decoding produces exactly the tokens of re-reading the whole sequence each step,
// and cached logits equal full-sequence logits (also when a chunk of several tokens follows
// cached ones, the bottom-right causal mask). Sampling is reproducible from its seed and
// its filters reduce to greedy at their limits.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <algorithm>

#include <ATen/CPUGeneratorImpl.h>

#include "siamese/common/error.h"
#include "siamese/eval/generate.h"
#include "siamese/model/accounting.h"
#include "siamese/model/topology_table.h"
#include "support/tiny_configs.h"

namespace siamese::eval {
namespace {

config::ModelConfig small(const std::string& residual, bool rope = true) {
  config::ModelConfig c;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // GQA: the cache holds kv heads, repeated after
  c.n_layers = 3;
  c.rope = rope;
  c.vocab_size = 50;
  c.embedding_size = 64;
  c.max_sequence_length = 48;
  c.attention_dropout = c.residual_dropout = c.embedding_dropout = 0.0;
  siamese::testing::set_topology(c, residual);
  return c;
}

model::Transformer build(const config::ModelConfig& c) {
  torch::manual_seed(0);
  model::Transformer m(c);
  m->eval();
  // Norm weights and topology parameters (hc's dynamic W starts at 0) away from their
  // initial values, so that every part of the residual path matters.
  torch::NoGradGuard g;
  for (auto& p : m->named_parameters())
    if (model::param_kind(p.key()) == model::ParamKind::Norm)
      p.value().copy_(1.0 + 0.3 * torch::randn_like(p.value()));
  return m;
}

std::vector<int64_t> prompt(int64_t n) {
  torch::manual_seed(1);
  auto t = torch::randint(50, {n}, torch::kLong);
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

// Greedy decoding of at most `tokens` after a prompt of `prompt_length` gives the same tokens
// with and without the KV cache; returns them.
std::vector<int64_t> expect_cache_keeps_greedy(model::TransformerImpl& m, int64_t prompt_length,
                                               int64_t tokens) {
  Sampling s;
  s.max_tokens = tokens;
  s.use_cache = false;
  const auto reference = generate(m, prompt(prompt_length), s);
  s.use_cache = true;
  EXPECT_EQ(generate(m, prompt(prompt_length), s), reference);
  return reference;
}

class EveryTopology : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryTopology, CachedGreedyGivesTheTokensOfUncachedGreedy) {
  auto m = build(small(GetParam()));
  EXPECT_EQ(expect_cache_keeps_greedy(*m, 9, 24).size(), 24u);
}

// Logits of 20 random tokens read through the KV cache: a prefill of 7, a chunk of 5 after
// cached positions (explicit mask), then single tokens; against one full forward.
void expect_cached_logits_equal_full_logits(model::TransformerImpl& m) {
  torch::NoGradGuard g;
  torch::manual_seed(2);
  const auto ids = torch::randint(50, {2, 20}, torch::kLong);
  const auto full = m.forward(ids);
  model::KvCache cache(3, 20);
  model::ForwardOptions o;
  o.cache = &cache;
  std::vector<torch::Tensor> parts;
  for (auto [from, to] : std::vector<std::pair<int64_t, int64_t>>{{0, 7}, {7, 12}})
    parts.push_back(m.head(m.hidden(ids.slice(1, from, to), o)));
  for (int64_t t = 12; t < 20; ++t) parts.push_back(m.head(m.hidden(ids.slice(1, t, t + 1), o)));
  EXPECT_EQ(cache.length(), 20);
  // Relative to the largest logit: nGPT scales its logits by s_z sqrt(d), and float32 rounding
  // of the cached and full paths differs with the thread count.
  EXPECT_LT(max_diff(torch::cat(parts, 1), full), 1e-5 * std::max(1.0, full.abs().max().item<double>()));
}

TEST_P(EveryTopology, CachedLogitsEqualFullSequenceLogits) {
  auto m = build(small(GetParam()));
  expect_cached_logits_equal_full_logits(*m);
}

// Dropless routing acts on each token alone, so the cache sees the same MoE blocks as a full
// forward: the same logits and greedy tokens.
TEST_P(EveryTopology, MoeBlocksKeepCachedLogitsAndGreedyTokens) {
  auto c = small(GetParam());
  c.block_type = config::BlockType::Moe;
  c.moe_num_experts = 4;
  c.moe_top_k = 2;
  auto m = build(c);
  expect_cache_keeps_greedy(*m, 6, 16);
  expect_cached_logits_equal_full_logits(*m);
}

INSTANTIATE_TEST_SUITE_P(Generate, EveryTopology, ::testing::ValuesIn(model::topology_names()));
INSTANTIATE_TEST_SUITE_P(SiameseCouplings, EveryTopology,
                         ::testing::ValuesIn(siamese::testing::kSiameseCouplings));

// Sliding layers (model.sliding_window_pattern) cache only their last window - 1 positions, a
// ring that 24 generated tokens turn several times: the tokens and logits stay those of
// re-reading the whole sequence, for a prefill, a chunk after cached positions and single
// tokens.
class WindowedTopology : public ::testing::TestWithParam<std::string> {};

TEST_P(WindowedTopology, WindowSizedCachesKeepGreedyTokensAndLogits) {
  auto c = small(GetParam());
  c.sliding_window_pattern = {3, 6, -1};
  auto m = build(c);
  expect_cache_keeps_greedy(*m, 9, 24);
  expect_cached_logits_equal_full_logits(*m);
}

INSTANTIATE_TEST_SUITE_P(Generate, WindowedTopology, ::testing::ValuesIn(model::topology_names()));
INSTANTIATE_TEST_SUITE_P(SiameseCouplings, WindowedTopology,
                         ::testing::ValuesIn(siamese::testing::kSiameseCouplings));

TEST(Generate, LearnedPositionsFollowTheCache) {
  auto m = build(small("pre", /*rope=*/false));
  expect_cache_keeps_greedy(*m, 5, 16);
}

TEST(Generate, SamplingIsReproducibleAndItsLimitsAreGreedy) {
  auto m = build(small("hybrid_pre"));
  Sampling greedy;
  greedy.max_tokens = 12;
  const auto g = generate(*m, prompt(4), greedy);
  Sampling s = greedy;
  s.temperature = 1.5;
  s.seed = 7;
  EXPECT_EQ(generate(*m, prompt(4), s), generate(*m, prompt(4), s));
  s.top_k = 1;
  EXPECT_EQ(generate(*m, prompt(4), s), g);
  s.top_k = 0;
  s.top_p = 1e-6;
  EXPECT_EQ(generate(*m, prompt(4), s), g);
}

TEST(Generate, TopKAndTopPKeepOnlyTheLikelyTokens) {
  const auto logits = torch::tensor({0.0, 3.0, 2.9, -1.0, 2.8});
  auto rng = at::make_generator<at::CPUGeneratorImpl>(3);
  Sampling s;
  s.temperature = 1.0;
  s.top_k = 2;
  for (int i = 0; i < 50; ++i) {
    const auto t = choose_token(logits, s, rng);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
  s.top_k = 0;
  s.top_p = 0.5;  // p(1) ~ 0.36, p(1) + p(2) ~ 0.69: tokens 1 and 2
  for (int i = 0; i < 50; ++i) {
    const auto t = choose_token(logits, s, rng);
    EXPECT_TRUE(t == 1 || t == 2) << t;
  }
}

TEST(Generate, StopsAtEosAndRefusesWhatDoesNotFit) {
  auto m = build(small("pre"));
  Sampling s;
  s.max_tokens = 10;
  const auto free_run = generate(*m, prompt(4), s);
  s.eos = free_run[3];
  const auto stopped = generate(*m, prompt(4), s);
  ASSERT_LE(stopped.size(), 4u);
  EXPECT_EQ(stopped.back(), free_run[3]);
  EXPECT_THROW(generate(*m, {}, s), Error);
  s.max_tokens = 45;
  EXPECT_THROW(generate(*m, prompt(4), s), Error);
}

}  // namespace
}  // namespace siamese::eval
