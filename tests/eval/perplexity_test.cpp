// Perplexity of text against an independent computation: each scored token's log-probability
// taken from its own forward pass over exactly the context the sliding-window rule gives it
// (the window's start as a closed formula, not the scorer's loop).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/eval/perplexity.h"
#include "siamese/model/topology_table.h"
#include "support/tiny_configs.h"

namespace siamese::eval {
namespace {

// With fused_loss the scorer's head runs in chunks of 3 tokens (a window scores up to 7).
model::Transformer tiny(const std::string& residual, bool fused_loss = false) {
  config::ModelConfig c = siamese::testing::tiny_model(residual, {32, 4, 2, 40, 48, 8});
  c.fused_loss = fused_loss;
  c.fused_loss_chunk_tokens = 3;
  torch::manual_seed(0);
  model::Transformer m(c);
  m->eval();
  return m;
}

std::vector<int64_t> tokens(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  auto t = torch::randint(40, {n}, torch::kLong);
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n};
}

// log p(seq[t] | seq[start(t) .. t-1]), one forward pass per token.
double expected_nll(model::TransformerImpl& m, const std::vector<int64_t>& seq, int64_t window,
                    int64_t stride) {
  torch::NoGradGuard g;
  double nll = 0;
  const auto all = torch::tensor(seq, torch::kLong);
  for (int64_t t = 1; t < int64_t(seq.size()); ++t) {
    const int64_t over = t + 1 - window;
    const int64_t start = over <= 0 ? 0 : int64_t(std::ceil(double(over) / double(stride))) * stride;
    const auto logits = m.forward(all.slice(0, start, t).unsqueeze(0))[0][t - 1 - start];
    nll -= torch::log_softmax(logits, -1)[seq[t]].item<double>();
  }
  return nll;
}

TEST(Perplexity, SlidingWindowsScoreEachTokenWithItsContext) {
  for (const auto& [residual, fused] :
       std::vector<std::pair<std::string, bool>>{{"pre", false}, {"hybrid_pre", false}, {"pre", true}}) {
    auto m = tiny(residual, fused);
    const std::vector<TextDocument> docs = {{tokens(30, 1), 95}, {tokens(5, 2), 11}, {tokens(9, 3), 20}};
    for (auto [window, stride] : std::vector<std::pair<int64_t, int64_t>>{{8, 3}, {8, 7}, {6, 1}, {8, 4}}) {
      TextOptions o;
      o.window = window;
      o.stride = stride;
      o.bos = 7;
      const auto s = score_text(*m, docs, o);
      double nll = 0;
      for (const auto& d : docs) {
        std::vector<int64_t> seq{7};
        seq.insert(seq.end(), d.ids.begin(), d.ids.end());
        nll += expected_nll(*m, seq, window, stride);
      }
      EXPECT_NEAR(s.nll, nll, 1e-4 * nll)
          << residual << (fused ? " fused_loss" : "") << " window " << window << " stride " << stride;
      EXPECT_EQ(s.tokens, 44);
      EXPECT_EQ(s.bytes, 126);
      EXPECT_EQ(s.documents, 3);
      EXPECT_NEAR(s.bits_per_byte(), nll / std::log(2.0) / 126.0, 1e-4);
      EXPECT_NEAR(s.perplexity(), std::exp(nll / 44.0), 1e-3 * s.perplexity());
    }
  }
}

TEST(Perplexity, WithoutBosTheFirstTokenIsContextOnly) {
  auto m = tiny("pre");
  const auto ids = tokens(12, 4);
  TextOptions o;
  const auto s = score_text(*m, {{ids, 12}}, o);
  EXPECT_EQ(s.tokens, 11);
  EXPECT_NEAR(s.nll, expected_nll(*m, ids, 8, 4), 1e-4 * s.nll);
}

TEST(Perplexity, RefusesAWindowTheModelCannotRead) {
  auto m = tiny("pre");
  TextOptions o;
  o.window = 9;
  EXPECT_THROW(score_text(*m, {{tokens(4, 5), 4}}, o), Error);
  o.window = 8;
  o.stride = 8;
  EXPECT_THROW(score_text(*m, {{tokens(4, 5), 4}}, o), Error);
}

}  // namespace
}  // namespace siamese::eval
