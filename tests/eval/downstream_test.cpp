// Scoring against hand-computed values, and the chance-level sanity check of a random model.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "siamese/eval/downstream.h"
#include "siamese/model/accounting.h"
#include "siamese/model/topology_table.h"
#include "support/files.h"
#include "support/tiny_configs.h"

using siamese::testing::tokenizer_path;

using namespace siamese;
using namespace siamese::eval;

namespace {

// A bigram model whose next-token log-probabilities are the rows of `table` (V x V):
// hidden = one_hot(current token), head = hidden @ table. Rows of log-probs stay log-probs
// under log_softmax, so each predicted token costs exactly table[cur][next].
LanguageModel bigram(const torch::Tensor& table) {
  return {[](const torch::Tensor& ids) { return torch::one_hot(ids, 4).to(torch::kFloat64); },
          [table](const torch::Tensor& h) { return torch::matmul(h, table); }};
}

torch::Tensor table() {
  // p(next | cur), rows sum to 1.
  auto p = torch::tensor(
      {{0.1, 0.6, 0.2, 0.1}, {0.25, 0.25, 0.4, 0.1}, {0.7, 0.1, 0.1, 0.1}, {0.5, 0.2, 0.2, 0.1}},
      torch::kFloat64);
  return p.log();
}

}  // namespace

TEST(Downstream, LoglikIsTheSumOverContinuationTokens) {
  auto lm = bigram(table());
  std::vector<Request> reqs = {{{0}, {1, 2}}, {{3, 0}, {1, 2}}, {{2}, {0}}, {{1, 1, 1}, {2}}};
  auto ll = continuation_logliks(lm, reqs, /*batch_size=*/3, /*max_length=*/16, torch::kCPU);
  const double expect01 = std::log(0.6) + std::log(0.4);
  EXPECT_NEAR(ll[0], expect01, 1e-12);
  EXPECT_NEAR(ll[1], expect01, 1e-12);
  EXPECT_NEAR(ll[2], std::log(0.7), 1e-12);
  EXPECT_NEAR(ll[3], std::log(0.4), 1e-12);
}

TEST(Downstream, LeftTruncationKeepsTheLastTokens) {
  auto lm = bigram(table());
  // Input [3, 0, 1] cut to [0, 1]: both continuation tokens keep their predicting position.
  auto ll = continuation_logliks(lm, {{{3, 0}, {1, 2}}}, 1, 2, torch::kCPU);
  EXPECT_NEAR(ll[0], std::log(0.6) + std::log(0.4), 1e-12);
  // A window of one keeps only the last predicting position.
  ll = continuation_logliks(lm, {{{3, 0}, {1, 2}}}, 1, 1, torch::kCPU);
  EXPECT_NEAR(ll[0], std::log(0.4), 1e-12);
}

TEST(Downstream, OptionScoresAndArgmax) {
  EXPECT_DOUBLE_EQ(option_score(Metric::Acc, -4, " ab", 0), -4);
  EXPECT_DOUBLE_EQ(option_score(Metric::LenNorm, -4, " ab", 0), -2);             // 2 chars after the space
  EXPECT_DOUBLE_EQ(option_score(Metric::LenNorm, -6, " caf\xc3\xa9", 0), -1.5);  // code points
  EXPECT_DOUBLE_EQ(option_score(Metric::PmiDc, -4, " ab", -2), 2);               // divided, as OLMo
  EXPECT_EQ(argmax({-1, -0.5, -0.5}), 1);                                        // the first of a tie
  // Logliks [-4, -6] for " ab" / " abcdef", dc [-2, -12]: acc picks 0, len_norm 1, pmi_dc 0.
  EXPECT_EQ(argmax({option_score(Metric::Acc, -4, " ab", -2), option_score(Metric::Acc, -6, " abcdef", -12)}),
            0);
  EXPECT_EQ(argmax({option_score(Metric::LenNorm, -4, " ab", -2),
                    option_score(Metric::LenNorm, -6, " abcdef", -12)}),
            1);
  EXPECT_EQ(
      argmax({option_score(Metric::PmiDc, -4, " ab", -2), option_score(Metric::PmiDc, -6, " abcdef", -12)}),
      0);
}

// With all-zero logits every token costs log V: acc prefers fewer tokens, len_norm more
// characters per token, pmi_dc sees a ratio of 1 everywhere (a tie: the first option).
TEST(Downstream, TaskAccuracyPerMetricByHand) {
  auto tok = tokenizer::Tokenizer::from_file(tokenizer_path("gpt2"));
  ASSERT_EQ(tok.encode(" hello world").size(), 2u);
  ASSERT_EQ(tok.encode(" x").size(), 1u);
  const int64_t V = 50257;  // gpt2's vocabulary
  LanguageModel uniform{[](const torch::Tensor& ids) {
                          return torch::zeros({ids.size(0), ids.size(1), 3});
                        },
                        [V](const torch::Tensor& h) {
                          return torch::zeros({h.size(0), V});
                        }};
  Task task{"t", "t", Metric::Acc, {}};
  task.docs.push_back({{{"Q:", " hello world", "A:"}, {"Q:", " x", "A:"}}, 0});
  task.docs.push_back({{{"Q:", " x", "A:"}, {"Q:", " hello world", "A:"}}, 1});
  DownstreamOptions opt;
  opt.max_length = 32;
  auto acc = run_downstream(uniform, tok, task, opt);
  EXPECT_DOUBLE_EQ(acc.accuracy, 0.0);
  EXPECT_EQ(acc.metric_key(), "eval/downstream/t_acc");
  opt.metric = Metric::LenNorm;
  EXPECT_DOUBLE_EQ(run_downstream(uniform, tok, task, opt).accuracy, 1.0);
  opt.metric = Metric::PmiDc;
  auto pmi = run_downstream(uniform, tok, task, opt);
  EXPECT_DOUBLE_EQ(pmi.accuracy, 0.5);
  EXPECT_EQ(pmi.predictions, (std::vector<int64_t>{0, 0}));
}

TEST(Downstream, BatchingDoesNotChangeScores) {
  torch::manual_seed(3);
  config::ModelConfig cfg;
  cfg.d_model = 32;
  cfg.n_heads = 2;
  cfg.n_layers = 2;
  cfg.vocab_size = 50;
  cfg.embedding_size = 64;
  cfg.max_sequence_length = 32;
  cfg.attention_dropout = cfg.residual_dropout = cfg.embedding_dropout = 0;
  cfg.rope = true;
  model::Transformer m(cfg);
  m->eval();
  std::vector<Request> reqs;
  for (int i = 0; i < 7; ++i) {
    Request r;
    for (int t = 0; t < 3 + 4 * i; ++t) r.context.push_back((7 * i + 3 * t) % 50);
    r.continuation = {int64_t(i % 50), int64_t((i * 11) % 50)};
    reqs.push_back(r);
  }
  auto one = continuation_logliks(language_model(*m), reqs, 1, 32, torch::kCPU);
  auto many = continuation_logliks(language_model(*m), reqs, 4, 32, torch::kCPU);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_NEAR(one[i], many[i], 1e-4) << i;
}

// The options of a question share its context: reading it once into the KV cache and
// continuing each option from there scores exactly what reading every option whole does (up
// to float rounding), for every topology, with RoPE (contexts of different lengths
// left-padded into one pass) and learned positions, GQA, options of one to four tokens, a context
// too long for the window (read whole, cut from the left), pmi_dc-style groups larger than
// the batch, and a lone request. The progress callback counts every request once.
class SharedContexts : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedContexts, ScoreAsReadingEachOptionWhole) {
  for (const bool rope : {true, false}) {  // contexts of several lengths share a pass with RoPE only
    SCOPED_TRACE(rope ? "rope" : "learned positions");
    config::ModelConfig cfg = siamese::testing::tiny_model(GetParam(), {32, 4, 3, 50, 64, 24});
    cfg.n_kv_heads = 2;
    cfg.rope = rope;
    torch::manual_seed(0);
    model::Transformer m(cfg);
    m->eval();
    {
      torch::NoGradGuard g;  // every norm and topology parameter away from its initial value
      for (auto& p : m->named_parameters())
        if (model::param_kind(p.key()) == model::ParamKind::Norm)
          p.value().copy_(1.0 + 0.3 * torch::randn_like(p.value()));
    }
    std::vector<Request> reqs;
    auto ids = [](int64_t n, int64_t seed) {
      std::vector<int64_t> v;
      for (int64_t i = 0; i < n; ++i) v.push_back((seed * 7 + i * 13) % 50);
      return v;
    };
    for (int64_t q = 0; q < 6; ++q)  // questions of 3 + 2q tokens, four options each
      for (int64_t o = 0; o < 4; ++o) reqs.push_back({ids(3 + 2 * q, q), ids(1 + (o + q) % 4, 10 * q + o)});
    for (int64_t o = 0; o < 3; ++o) reqs.push_back({ids(22, 99), ids(4, 50 + o)});          // 25 > 24: whole
    for (int64_t o = 0; o < 11; ++o) reqs.push_back({ids(4, 77), ids(2 + o % 3, 60 + o)});  // 11 > batch 9
    reqs.push_back({ids(5, 123), ids(3, 124)});                                             // alone

    auto shared_lm = language_model(*m);
    auto whole_lm = shared_lm;
    whole_lm.transformer = nullptr;
    int64_t read_whole = 0;  // requests the shared scorer read whole (the rest shared a context)
    shared_lm.hidden = [&](const torch::Tensor& ids) {
      read_whole += ids.size(0);
      return m->hidden(ids);
    };
    int64_t last_done = 0, calls = 0;
    const auto shared =
        continuation_logliks(shared_lm, reqs, 9, 24, torch::kCPU, [&](int64_t done, int64_t total) {
          EXPECT_GT(done, last_done);
          EXPECT_EQ(total, int64_t(reqs.size()));
          last_done = done;
          ++calls;
        });
    const auto whole = continuation_logliks(whole_lm, reqs, 9, 24, torch::kCPU);
    EXPECT_EQ(last_done, int64_t(reqs.size()));
    // Read whole: the 3-token question (sharing would not save reads), the context too long
    // for the window, the lone request; 36 of the 44 shared a context.
    EXPECT_EQ(read_whole, 4 + 3 + 1);
    EXPECT_GT(calls, 3);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_LT(whole[i], 0.0);
      EXPECT_NEAR(shared[i], whole[i], 2e-5 * std::abs(whole[i])) << "request " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Downstream, SharedContexts, ::testing::ValuesIn(model::topology_names()));

// A randomly initialised model knows nothing: on no task is its accuracy more than 3 sigma
// above chance. Chance is taken under the null hypothesis that predictions are independent of
// the gold answers: document d is right with probability pi_d = the fraction of documents
// for which the model chose index gold_d. This is mean(1/options) for a uniform guesser and
// the majority rate for a constant one (a random model's favourite option, e.g. always " yes"
// on BoolQ, whose gold answers are 62% yes), which a fixed 1/options would wrongly fail.
TEST(Downstream, RandomModelScoresAtChance) {
  auto tok = tokenizer::Tokenizer::from_file(tokenizer_path("olmo-gpt-neox-20b-pii-special"));
  torch::manual_seed(1234);
  config::ModelConfig cfg = siamese::testing::tiny_model("pre", {64, 4, 2, 50280, 50304, 128});
  cfg.rope = true;
  model::Transformer m(cfg);
  DownstreamOptions opt;
  opt.batch_size = 32;
  for (const auto& name : task_names()) {
    Task task = load_task(name, shared_dir() + "/evals", 60);
    auto r = run_downstream(*m, tok, task, opt);
    const double n = double(task.docs.size());
    std::map<int64_t, double> chosen;
    for (int64_t p : r.predictions) chosen[p] += 1.0 / n;
    double chance = 0, var = 0;
    for (const auto& d : task.docs) {
      const double pi = chosen[d.gold];
      chance += pi / n;
      var += pi * (1 - pi);
    }
    const double sigma = std::sqrt(var) / n;
    // One-sided: an untrained model may fall below chance where a task's correct answers are
    // longer than its distractors (acc sums log-probabilities, so it favours short options;
    // measured: 0.08 vs chance 0.25 on one task's first 60 documents), never above it.
    EXPECT_LE(r.accuracy, chance + 3 * sigma + 1e-9) << name << " (" << task.docs.size() << " docs)";
  }
}
