#pragma once
// In-training evaluation: validation loss / perplexity on token files (`type: lm`
// evaluators), and for the synthetic arithmetic corpus the held-out loss plus exact-match
// accuracy of greedily decoded answers.
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "siamese/common/metrics_row.h"
#include "siamese/config/config.h"
#include "siamese/data/arithmetic.h"
#include "siamese/data/token_dataset.h"
#include "siamese/dist/collectives.h"
#include "siamese/eval/downstream.h"
#include "siamese/model/transformer.h"

namespace siamese::eval {

// One decoded held-out problem, so that a reader can see what a model answers.
struct ArithmeticSample {
  std::string prompt;  // "347+85="
  std::string output;  // the greedy continuation up to its newline, e.g. "432"
  std::string answer;  // the right answer
  bool correct = false;
};

struct EvalResult {
  std::string label;
  double loss = 0;  // mean next-token cross-entropy
  int64_t tokens = 0;
  std::optional<double> exact_match;           // arithmetic only: fraction of answers exactly right
  std::optional<DownstreamResult> downstream;  // `type: downstream` evaluators
  std::vector<ArithmeticSample> samples;       // arithmetic only: the first few problems

  double perplexity() const;
  MetricsRow to_row(int64_t step) const;
};

// The greedy continuation of "\n<prompt>" of every problem, in order; a sample is correct
// when the continuation is exactly "<answer>\n".
std::vector<ArithmeticSample> arithmetic_answers(model::TransformerImpl& model,
                                                 const std::vector<data::ArithmeticProblem>& problems,
                                                 torch::Device device);

class Evaluators {
 public:
  // Builds the `lm` evaluators of cfg.evaluators (and the held-out arithmetic evaluator
  // when data.synthetic is arithmetic). Ranks split the batches; results are summed.
  Evaluators(const config::EvalSection& cfg, torch::Device device, dist::Collectives& ranks);
  bool empty() const { return sets_.empty() && tasks_.empty(); }
  // Runs every evaluator in eval mode and restores the model's training mode.
  std::vector<EvalResult> run(model::TransformerImpl& model);

 private:
  struct Set {
    std::string label;
    std::unique_ptr<data::TokenDataset> data;
    int64_t num_batches;
    std::vector<data::ArithmeticProblem> problems;
  };
  std::vector<Set> sets_;
  std::vector<Task> tasks_;  // downstream evaluators (src/eval)
  std::optional<tokenizer::Tokenizer> tokenizer_;
  int64_t batch_size_;
  torch::Device device_;
  dist::Collectives& ranks_;
};

}  // namespace siamese::eval
