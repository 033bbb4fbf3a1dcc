#include "siamese/eval/evaluators.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "siamese/common/shared_dir.h"
#include "siamese/model/lm_loss.h"

namespace siamese::eval {

namespace {

constexpr int64_t kHeldOutTokens = 1 << 16;
constexpr int64_t kHeldOutProblems = 256;
constexpr size_t kLoggedSamples = 8;

}  // namespace

double EvalResult::perplexity() const { return std::exp(loss); }

MetricsRow EvalResult::to_row(int64_t step) const {
  if (downstream) return downstream->to_row(step);  // OLMo's eval/downstream/<label>_<metric>
  nlohmann::ordered_json fields = {{metric::kLabel, label},
                                   {metric::kLoss, loss},
                                   {metric::kPerplexity, perplexity()},
                                   {metric::kTokens, tokens}};
  if (exact_match) fields[metric::kExactMatch] = *exact_match;
  if (!samples.empty()) {
    auto list = nlohmann::ordered_json::array();
    for (const auto& s : samples)
      list.push_back(
          {{"prompt", s.prompt}, {"output", s.output}, {"answer", s.answer}, {"correct", s.correct}});
    fields["samples"] = std::move(list);
  }
  return metrics_row(step, metric::kEvalEvent, fields);
}

std::vector<ArithmeticSample> arithmetic_answers(model::TransformerImpl& model,
                                                 const std::vector<data::ArithmeticProblem>& problems,
                                                 torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<ArithmeticSample> samples(problems.size());
  // Problems of equal prompt length decode together as one batch.
  std::map<size_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < problems.size(); ++i) by_length[problems[i].prompt.size()].push_back(i);
  for (const auto& [len, members] : by_length) {
    const auto n = static_cast<int64_t>(members.size());
    auto ids = torch::empty({n, static_cast<int64_t>(len) + 1}, torch::kInt64);
    for (int64_t r = 0; r < n; ++r) {
      const std::string text = "\n" + problems[members[r]].prompt;
      for (size_t c = 0; c < text.size(); ++c) ids[r][c] = static_cast<unsigned char>(text[c]);
    }
    ids = ids.to(device);
    size_t longest = 0;
    for (auto m : members) longest = std::max(longest, problems[m].answer.size());
    for (size_t k = 0; k <= longest; ++k) {
      auto logits = model.forward(ids);
      auto next = logits.select(1, ids.size(1) - 1).argmax(-1, /*keepdim=*/true);
      ids = torch::cat({ids, next}, 1);
    }
    const auto out = ids.to(torch::kCPU).contiguous();
    const auto* tokens = out.data_ptr<int64_t>();
    const auto width = out.size(1);
    for (int64_t r = 0; r < n; ++r) {
      auto& s = samples[members[r]];
      s.prompt = problems[members[r]].prompt;
      s.answer = problems[members[r]].answer;
      bool ended = false;
      for (int64_t c = static_cast<int64_t>(len) + 1; c < width && !ended; ++c) {
        const int64_t t = tokens[r * width + c];
        ended = t == '\n';
        if (!ended) s.output.push_back(static_cast<char>(t));
      }
      s.correct = ended && s.output == s.answer;
    }
  }
  return samples;
}

Evaluators::Evaluators(const config::EvalSection& cfg, torch::Device device, dist::Collectives& ranks)
    : batch_size_(cfg.batch_size), device_(device), ranks_(ranks) {
  const int64_t T = cfg.data.sequence_length;
  for (size_t i = 0; i < cfg.evaluators.size(); ++i) {
    const auto& e = cfg.evaluators[i];
    if (e.type == config::EvaluatorType::Downstream) {
      if (!tokenizer_) tokenizer_ = tokenizer::Tokenizer::from_file(cfg.tokenizer.identifier);
      tasks_.push_back(load_task(e.label, !e.data_dir.empty() ? e.data_dir : shared_dir() + "/evals"));
      continue;
    }
    const config::TokenDtype dtype = e.memmap_dtype.value_or(cfg.data.data.memmap_dtype);
    const int64_t subset = e.subset_num_batches > 0 ? e.subset_num_batches : cfg.subset_num_batches;
    sets_.push_back({e.label.empty() ? fmt::format("eval{}", i) : e.label,
                     std::make_unique<data::TokenDataset>(e.paths, dtype, T, cfg.data.vocab_size),
                     subset,
                     {}});
  }
  if (cfg.data.data.synthetic == config::SyntheticCorpus::Arithmetic) {
    const uint64_t seed = cfg.data.seed;
    const int digits = static_cast<int>(cfg.data.data.arithmetic_digits);
    // The answer check decodes greedily, a forward per answer character: at OLMo-1B on a CPU
    // its 256 problems took over 13 minutes. eval_subset_num_batches bounds it as it bounds
    // the loss, to that many batches of problems (the first ones, so results stay comparable).
    auto problems = data::arithmetic_held_out(seed, digits, kHeldOutProblems);
    if (cfg.subset_num_batches > 0)
      problems.resize(
          size_t(std::min<int64_t>(int64_t(problems.size()), cfg.subset_num_batches * batch_size_)));
    sets_.push_back(
        {"arithmetic_held_out",
         std::make_unique<data::TokenDataset>("synthetic arithmetic (held out)",
                                              data::arithmetic_held_out_tokens(seed, digits, kHeldOutTokens),
                                              T, cfg.data.vocab_size),
         cfg.subset_num_batches, std::move(problems)});
  }
}

std::vector<EvalResult> Evaluators::run(model::TransformerImpl& model) {
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  std::vector<EvalResult> results;
  for (auto& set : sets_) {
    const int64_t total_batches = (set.data->size() + batch_size_ - 1) / batch_size_;
    const int64_t batches = set.num_batches > 0 ? std::min(set.num_batches, total_batches) : total_batches;
    double loss_sum = 0, tokens = 0;
    // Every rank runs as many forwards as the busiest one (a rank past the end repeats the
    // round's first batch and counts nothing): a strategy that gathers parameters in forward
    // (FULL_SHARD) needs every rank in each of its collectives.
    for (int64_t round = 0; round < batches; round += ranks_.world_size()) {
      const int64_t b = round + ranks_.rank();
      const int64_t read = b < batches ? b : round;
      std::vector<int64_t> idx;
      for (int64_t i = read * batch_size_; i < std::min(set.data->size(), (read + 1) * batch_size_); ++i)
        idx.push_back(i);
      auto ids = set.data->batch(idx).to(device_);
      const double loss = model::lm_loss_sum(model, ids).item<double>();
      if (b >= batches) continue;
      loss_sum += loss;
      tokens += ids.size(0) * (ids.size(1) - 1);
    }
    loss_sum = ranks_.sum(loss_sum);
    tokens = ranks_.sum(tokens);
    EvalResult r{set.label, loss_sum / tokens, static_cast<int64_t>(tokens), std::nullopt, std::nullopt, {}};
    if (!set.problems.empty()) {
      auto answers = arithmetic_answers(model, set.problems, device_);
      const auto correct =
          std::count_if(answers.begin(), answers.end(), [](const ArithmeticSample& s) { return s.correct; });
      r.exact_match = static_cast<double>(correct) / static_cast<double>(answers.size());
      answers.resize(std::min<size_t>(answers.size(), kLoggedSamples));
      r.samples = std::move(answers);
    }
    results.push_back(r);
  }
  for (const auto& task : tasks_) {
    DownstreamOptions o;
    o.batch_size = batch_size_;
    o.device = device_;
    EvalResult r{task.label, NAN, 0, std::nullopt, run_downstream(model, *tokenizer_, task, o), {}};
    results.push_back(r);
  }
  if (was_training) model.train();
  return results;
}

}  // namespace siamese::eval
