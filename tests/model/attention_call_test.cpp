// The attention kernel table on its own (no model): which row takes which call, and that the
// rows the CPU can run compute reference_attention's values.
#include "siamese/model/attention_call.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/rounding.h"

namespace siamese::model {
namespace {

// q of T positions after `past` cached ones, keys of every position from 0.
AttentionCall make_call(int64_t T, int64_t past, std::optional<int64_t> window) {
  torch::manual_seed(11 + T + past);
  AttentionCall c;
  const auto opts = torch::dtype(torch::kFloat64);
  c.q = torch::randn({2, 3, T, 8}, opts);
  c.k = torch::randn({2, 3, past + T, 8}, opts);
  c.v = torch::randn({2, 3, past + T, 8}, opts);
  c.past = past;
  c.cached = past > 0;
  c.window = window;
  return c;
}

TEST(AttentionKernels, TheTableIsInItsDocumentedOrder) {
  std::vector<std::string> names;
  for (const auto& k : attention_kernels()) names.push_back(k.name);
  EXPECT_EQ(names, (std::vector<std::string>{"flash_varlen", "flash_window", "sdpa_documents", "sdpa_padded",
                                             "sdpa_banded", "sdpa_masked", "reference", "sdpa_causal"}));
}

TEST(AttentionKernels, EachCallGoesToTheFirstRowThatTakesIt) {
  struct Case {
    const char* what;
    AttentionCall call;
    const char* kernel;
  };
  Documents docs;
  std::vector<Case> cases = {
      {"causal", make_call(6, 0, std::nullopt), "sdpa_causal"},
      {"one new query after a cache", make_call(1, 5, std::nullopt), "sdpa_causal"},
      {"queries after a cache", make_call(3, 5, std::nullopt), "sdpa_masked"},
      {"a window as wide as the row", make_call(6, 0, 6), "sdpa_masked"},
      {"a row over twice the window", make_call(13, 0, 6), "sdpa_banded"},
      {"a long row after a cache", make_call(13, 2, 6), "sdpa_masked"},
  };
  Case with_docs{"packed documents", make_call(6, 0, 4), "sdpa_documents"};
  with_docs.call.docs = &docs;
  cases.push_back(with_docs);
  Case padded{"a padded cache", make_call(2, 4, std::nullopt), "sdpa_padded"};
  padded.call.keys_valid = torch::ones({2, 6}, torch::kBool);
  cases.push_back(padded);
  Case reference{"the reference asked for", make_call(13, 0, 6), "reference"};
  reference.call.reference = true;
  cases.push_back(reference);
  // The flash rows want CUDA half heads; these are CPU float64 and go on down the table.
  for (const auto& c : cases) EXPECT_STREQ(pick_attention_kernel(c.call).name, c.kernel) << c.what;
}

// Each value is a softmax-weighted sum over at most S keys, so two ways of computing it differ
// by gamma_S of max |v| (the weights sum to 1), plus what the scores' rounding (gamma_hd of
// their size, which exp turns into a relative error of the weights) adds: 4 gamma_{S + hd}
// max |v| (1 + max |score|) covers both, each side rounding once.
TEST(AttentionKernels, CpuRowsComputeTheReferenceValues) {
  struct Case {
    const char* what;
    AttentionCall call;
  };
  const std::vector<Case> cases = {{"causal", make_call(6, 0, std::nullopt)},
                                   {"after a cache", make_call(3, 5, std::nullopt)},
                                   {"windowed", make_call(6, 0, 3)},
                                   {"banded", make_call(13, 0, 3)},
                                   {"windowed after a cache", make_call(4, 7, 3)}};
  for (const auto& c : cases) {
    const auto got = run_attention(c.call);
    const auto want = reference_attention(c.call.q, c.call.k, c.call.v, 0, false, std::nullopt, c.call.window)
                          .transpose(1, 2)
                          .reshape(got.sizes());
    const int64_t n = c.call.k.size(2) + c.call.q.size(3);
    const double score = torch::matmul(c.call.q, c.call.k.transpose(-2, -1)).abs().max().item<double>() /
                         std::sqrt(double(c.call.q.size(3)));
    EXPECT_LE((got - want).abs().max().item<double>(), 4 * siamese::testing::gamma(n, torch::kFloat64) *
                                                           c.call.v.abs().max().item<double>() * (1 + score))
        << c.what << " (" << pick_attention_kernel(c.call).name << ")";
  }
}

}  // namespace
}  // namespace siamese::model
