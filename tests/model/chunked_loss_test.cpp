// The chunked LM-head loss (fused_loss): the loss and every gradient equal the unchunked
// path's (float32, float64, bf16 autocast; tied and untied heads, a biased head, the z-loss,
// nGPT's logit scale, chunks that do not divide the token count), and the head never sees
// more than one chunk of rows at once, in forward or in backward.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include "siamese/common/autocast.h"
#include "siamese/model/lm_loss.h"
#include "siamese/model/topology_table.h"
#include "siamese/model/transformer.h"
#include "support/rounding.h"
#include "support/tiny_configs.h"

namespace siamese::model {
namespace {

struct ChunkCase {
  std::string residual;
  bool tied = true;
  bool bias = false;
  std::optional<double> z;
  int64_t chunk = 7;  // 3 x 15 = 45 predicted tokens: a partial last chunk
};

config::ModelConfig chunk_config(const ChunkCase& k, bool fused) {
  config::ModelConfig c = siamese::testing::tiny_model(k.residual, {32, 4, 2, 61, 64, 16});
  c.rope = true;
  c.layer_norm_type = config::LayerNormType::RMS;
  c.include_bias = k.bias;
  c.weight_tying = k.tied;
  c.fused_loss = fused;
  c.fused_loss_chunk_tokens = k.chunk;
  return c;
}

struct LossGrads {
  torch::Tensor nll, z;
  std::vector<torch::Tensor> grads;  // every parameter's, in named_parameters order
};

// The next-token loss of one batch through the whole model, and every parameter gradient.
LossGrads model_loss_grads(const ChunkCase& k, bool fused, torch::Dtype dtype, bool autocast) {
  const config::ModelConfig cfg = chunk_config(k, fused);
  torch::manual_seed(5);
  Transformer m(cfg);
  m->reset_parameters();
  m->to(dtype);
  torch::manual_seed(9);
  const auto ids = torch::randint(0, cfg.vocab_size, {3, cfg.max_sequence_length});
  LossSums sums;
  {
    std::optional<AutocastGuard> amp;
    if (autocast) amp.emplace(torch::kCPU, torch::kBFloat16);
    sums = lm_loss_sums(*m, ids, k.z);
  }
  sums.total().backward();
  LossGrads r{sums.nll.detach(), sums.z.defined() ? sums.z.detach() : torch::Tensor(), {}};
  for (const auto& p : m->named_parameters()) {
    EXPECT_TRUE(p.value().grad().defined()) << k.residual << ": no gradient for " << p.key();
    r.grads.push_back(p.value().grad().defined() ? p.value().grad() : torch::zeros_like(p.value()));
  }
  return r;
}

// max |a - b| / max |b|: the error relative to the tensor's scale.
double scaled_error(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

// The losses within `tolerance` of their size; each gradient within `grad_bound` where given,
// else within `tolerance` of its largest entry.
void expect_same(const LossGrads& chunked, const LossGrads& plain, double tolerance, const std::string& what,
                 std::optional<double> grad_bound = std::nullopt) {
  EXPECT_LE(scaled_error(chunked.nll, plain.nll), tolerance) << what << " nll";
  ASSERT_EQ(chunked.z.defined(), plain.z.defined()) << what;
  if (plain.z.defined()) {
    EXPECT_LE(scaled_error(chunked.z, plain.z), tolerance) << what << " z";
  }
  ASSERT_EQ(chunked.grads.size(), plain.grads.size()) << what;
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    if (grad_bound) {
      EXPECT_LE((chunked.grads[i] - plain.grads[i]).abs().max().item<double>(), *grad_bound)
          << what << " parameter " << i;
    } else {
      EXPECT_LE(scaled_error(chunked.grads[i], plain.grads[i]), tolerance) << what << " parameter " << i;
    }
  }
}

std::vector<ChunkCase> head_cases() {
  return {{"pre", true, false, std::nullopt, 7},    {"pre", false, true, 1e-2, 7},
          {"pre", true, false, 1e-2, 16},           {"pre", false, false, std::nullopt, 45},
          {"pre", true, false, std::nullopt, 100},  {"ngpt", true, false, 1e-2, 7},
          {"ngpt", false, false, std::nullopt, 13}, {"hybrid_pre", false, false, 1e-2, 11}};
}

std::string describe(const ChunkCase& k) {
  return k.residual + (k.tied ? " tied" : " untied") + (k.bias ? " biased" : "") + (k.z ? " z-loss" : "") +
         " chunk " + std::to_string(k.chunk);
}

// Each parameter's sum over the predicted tokens of |d(token's loss)/d parameter|.
std::vector<torch::Tensor> per_token_abs_sums(const ChunkCase& k) {
  const config::ModelConfig cfg = chunk_config(k, false);
  torch::manual_seed(5);
  Transformer m(cfg);
  m->reset_parameters();
  m->to(torch::kFloat64);
  torch::manual_seed(9);
  const auto ids = torch::randint(0, cfg.vocab_size, {3, cfg.max_sequence_length});
  const int64_t T = ids.size(1) - 1;
  const auto targets = ids.narrow(1, 1, T);
  const auto logits = m->head(m->hidden(ids.narrow(1, 0, T)));
  std::vector<torch::Tensor> params, sums;
  for (const auto& p : m->parameters()) {
    params.push_back(p);
    sums.push_back(torch::zeros_like(p));
  }
  for (int64_t b = 0; b < targets.size(0); ++b)
    for (int64_t t = 0; t < T; ++t) {
      const auto term = loss_sums(logits[b][t], targets[b][t], k.z).total();
      const auto g =
          torch::autograd::grad({term}, params, {}, /*retain_graph=*/true, false, /*allow_unused=*/true);
      for (size_t i = 0; i < g.size(); ++i)
        if (g[i].defined()) sums[i] += g[i].abs();
    }
  return sums;
}

// The two paths run the same body; only the head differs. Its matmuls round differently for
// a chunk of rows than for all of them (the blocking depends on the row count and the CPU's
// vector width), and its sums over tokens group by chunk. Every gradient is a sum over
// tokens of per-token terms, each computed through sums of at most n = tokens + vocabulary +
// d_model terms, so the two differ by at most 2 gamma_n times the terms' absolute size.
// That size is taken normwise, as the model's largest per-token absolute sum G: a parameter
// in front of a norm (the speedrun scalars, mHC's mixing inputs) has a gradient that cancels
// inside each token's backward, from terms as large as the others', so neither its own size
// nor its own per-token sum bounds its rounding. A bound of 1e-12 max |gradient| failed
// there (1.3e-11 on an AMD EPYC without AVX-512); measured under the AVX-512, AVX2 and
// baseline kernels, every topology's float64 difference stays within 5% of this bound.
void expect_within_rounding(const LossGrads& chunked, const LossGrads& plain, const ChunkCase& k,
                            torch::Dtype dtype) {
  double largest = 0;
  for (const auto& s : per_token_abs_sums(k)) largest = std::max(largest, s.max().item<double>());
  const config::ModelConfig cfg = chunk_config(k, false);
  const int64_t n = 3 * (cfg.max_sequence_length - 1) + cfg.vocab_size + cfg.d_model;
  const double bound = 2 * siamese::testing::gamma(n, dtype);
  const std::string what = describe(k) + " " + std::string(c10::toString(dtype)) +
                           " (G = " + std::to_string(largest) + "; the losses are sums of positive terms)";
  expect_same(chunked, plain, bound, what, bound * largest);
}

// In float32 the bound is 1.6e-5 G: it catches a chunk lost or counted twice (1/45 of the
// loss at the least), and the float64 run below catches what is smaller.
TEST(ChunkedLoss, EqualsTheUnchunkedLossAndGradientsInFloat32) {
  for (const auto& k : head_cases())
    expect_within_rounding(model_loss_grads(k, true, torch::kFloat32, false),
                           model_loss_grads(k, false, torch::kFloat32, false), k, torch::kFloat32);
}

TEST(ChunkedLoss, EqualsTheUnchunkedLossAndGradientsInFloat64) {
  for (const auto& k : head_cases())
    expect_within_rounding(model_loss_grads(k, true, torch::kFloat64, false),
                           model_loss_grads(k, false, torch::kFloat64, false), k, torch::kFloat64);
}

TEST(ChunkedLoss, EqualsTheUnchunkedLossAndGradientsUnderBf16Autocast) {
  for (const auto& k : head_cases()) {
    const LossGrads chunked = model_loss_grads(k, true, torch::kFloat32, true);
    const LossGrads plain = model_loss_grads(k, false, torch::kFloat32, true);
    EXPECT_EQ(chunked.nll.scalar_type(), torch::kFloat32) << "the loss is float32 under autocast";
    // The head's bfloat16 logits round once more than float32's, a chunk's and the batch's
    // at different elements: 2e-2 is five such roundings (2^-8 each). A worst-case gamma_n in
    // bfloat16 is 0.7 and tells nothing.
    expect_same(chunked, plain, 2e-2, describe(k) + " bf16");
  }
}

TEST(ChunkedLoss, EveryTopologyGetsTheSameGradients) {
  for (const auto& name : topology_names()) {
    const ChunkCase k{name, true, false, 1e-3, 10};
    expect_within_rounding(model_loss_grads(k, true, torch::kFloat64, false),
                           model_loss_grads(k, false, torch::kFloat64, false), k, torch::kFloat64);
  }
}

// The head's own input and weights, outside a model: the gradient of hidden and of the head
// matrix against autograd through the full logits, in float64. A logit is a sum of d = 8
// products, off by up to gamma_d A with A its absolute terms 1.5 |h| |w|, and that absolute
// error is the relative one of its probability. The softmax sums over V = 37 (three
// roundings more), the weight's gradient over N = 45 tokens, so each side is within
// gamma_n, n = N + V + 3 + d (1 + max A), relative to the absolute terms: the positive
// losses themselves, and 1.5 |dlogits| |W| and 1.5 |dlogits|^T |h|.
TEST(ChunkedLoss, HiddenAndHeadWeightGradientsMatchTheFullLogits) {
  torch::manual_seed(3);
  const auto weight = torch::randn({37, 8}, torch::kFloat64).requires_grad_();
  const auto hidden = torch::randn({5, 9, 8}, torch::kFloat64).requires_grad_();
  const auto targets = torch::randint(0, 37, {5, 9});
  const HeadFn head = [&weight](const torch::Tensor& h) { return torch::linear(h, weight) * 1.5; };

  const auto logits = head(hidden);
  const LossSums plain = loss_sums(logits, targets, 1e-2);
  const auto plain_grads = torch::autograd::grad({plain.total()}, {hidden, weight, logits});
  const LossSums chunked = chunked_loss_sums(head, hidden, targets, 1e-2, 4);
  const auto chunked_grads = torch::autograd::grad({chunked.total()}, {hidden, weight});
  const auto dlogits = plain_grads[2].abs().reshape({45, 37});
  const auto abs_hidden = (1.5 * dlogits.matmul(weight.detach().abs())).reshape({5, 9, 8});
  const auto abs_weight = 1.5 * dlogits.t().matmul(hidden.detach().abs().reshape({45, 8}));
  const double largest_logit_terms =
      (1.5 * hidden.detach().abs().reshape({45, 8}).matmul(weight.detach().abs().t())).max().item<double>();
  const auto n = int64_t(45 + 37 + 3 + std::ceil(8 * (1 + largest_logit_terms)));
  using siamese::testing::sum_order_ratio;
  EXPECT_LE(sum_order_ratio(chunked.nll, plain.nll, plain.nll, n), 1);
  EXPECT_LE(sum_order_ratio(chunked.z, plain.z, plain.z, n), 1);
  EXPECT_LE(sum_order_ratio(chunked_grads[0], plain_grads[0], abs_hidden, n), 1);
  EXPECT_LE(sum_order_ratio(chunked_grads[1], plain_grads[1], abs_weight, n), 1);
}

// The point of chunking: the head (and so the logits) never spans more than a chunk of
// rows, in forward, in backward, and without gradients (evaluation).
TEST(ChunkedLoss, TheHeadNeverSeesMoreThanOneChunk) {
  torch::manual_seed(4);
  const auto weight = torch::randn({50, 6}).requires_grad_();
  const auto hidden = torch::randn({2, 23, 6}).requires_grad_();
  const auto targets = torch::randint(0, 50, {2, 23});
  int64_t largest = 0, rows_seen = 0;
  const HeadFn head = [&](const torch::Tensor& h) {
    largest = std::max(largest, h.size(0));
    rows_seen += h.size(0);
    return torch::linear(h, weight);
  };
  const LossSums sums = chunked_loss_sums(head, hidden, targets, std::nullopt, 8);
  EXPECT_EQ(largest, 8);
  EXPECT_EQ(rows_seen, 1 + 46) << "one probe row to find the head's parameters, then every row once";
  sums.nll.backward();
  EXPECT_EQ(largest, 8);
  EXPECT_EQ(rows_seen, 1 + 2 * 46) << "backward recomputes every chunk once";
  ASSERT_TRUE(weight.grad().defined());
  ASSERT_TRUE(hidden.grad().defined());

  torch::NoGradGuard no_grad;
  rows_seen = 0;
  chunked_loss_sums(head, hidden, targets, std::nullopt, 8);
  EXPECT_EQ(rows_seen, 46) << "without gradients no probe and no backward node";
  EXPECT_EQ(largest, 8);
}

// Counts calls of a parameter's gradient accumulation.
class CountingHook : public torch::autograd::FunctionPostHook {
 public:
  explicit CountingHook(int* count) : count_(count) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ++*count_;
    return outputs;
  }

 private:
  int* count_;
};

// Data parallelism's buckets (dist/grad_bucketer.cpp) count one accumulation per parameter
// and step: over several chunks, the head's weight (here the tied embedding, which also
// gets the embedding's gradient) still accumulates once.
TEST(ChunkedLoss, EveryParameterAccumulatesItsGradientOnce) {
  for (bool tied : {true, false}) {
    const ChunkCase k{"ngpt", tied, false, 1e-2, 7};
    torch::manual_seed(5);
    Transformer m(chunk_config(k, true));
    std::vector<int> counts(m->parameters().size(), 0);
    std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
    for (size_t i = 0; i < counts.size(); ++i) {
      accumulators.push_back(torch::autograd::impl::grad_accumulator(m->parameters()[i]));
      accumulators.back()->add_post_hook(std::make_unique<CountingHook>(&counts[i]));
    }
    const auto ids = torch::randint(0, 61, {3, 16});
    lm_loss_sums(*m, ids, k.z).total().backward();
    for (size_t i = 0; i < counts.size(); ++i) EXPECT_EQ(counts[i], 1) << describe(k) << " parameter " << i;
  }
}

// Evaluation through the model (lm_loss_sum, as the evaluators and perplexity call it) is
// unchanged by fused_loss.
TEST(ChunkedLoss, EvaluationWithoutGradientsMatches) {
  const ChunkCase k{"pre", false, false, std::nullopt, 9};
  torch::manual_seed(9);
  const auto ids = torch::randint(0, 61, {4, 16});
  double loss[2];
  for (bool fused : {false, true}) {
    torch::manual_seed(5);
    Transformer m(chunk_config(k, fused));
    m->reset_parameters();
    m->eval();
    torch::NoGradGuard no_grad;
    loss[fused] = lm_loss_sum(*m, ids).item<double>();
  }
  // float32 sums of the same positive terms through a head blocked by chunk and not: 2 gamma_n
  // of the loss, n = tokens + vocabulary + d_model as for the gradients (1.8e-5).
  const int64_t n = 4 * 15 + 61 + 32;
  EXPECT_LE(std::abs(loss[1] - loss[0]), 2 * siamese::testing::gamma(n, torch::kFloat32) * loss[0]);
}

}  // namespace
}  // namespace siamese::model
