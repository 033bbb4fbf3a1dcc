#include "siamese/eval/downstream.h"

#include <fmt/format.h>


#include <algorithm>
#include <numeric>

#include "siamese/common/error.h"
#include "siamese/common/json_line.h"

namespace siamese::eval {

LanguageModel language_model(model::TransformerImpl& model) {
  return {[&model](const torch::Tensor& ids) { return model.hidden(ids); },
          [&model](const torch::Tensor& h) { return model.head(h); }};
}

std::vector<double> continuation_logliks(const LanguageModel& lm, const std::vector<Request>& reqs,
                                         int64_t batch_size, int64_t max_length,
                                         torch::Device device) {
  TORCH_CHECK(batch_size > 0 && max_length > 0, "batch_size and max_length must be positive");
  torch::NoGradGuard no_grad;
  // The model input of each request and where its continuation tokens are predicted.
  struct Prepared {
    std::vector<int64_t> input;
    std::vector<int64_t> positions, targets;
  };
  std::vector<Prepared> prep(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[i];
    std::vector<int64_t> full = r.context;
    full.insert(full.end(), r.continuation.begin(), r.continuation.end());
    full.pop_back();
    const int64_t drop = std::max<int64_t>(0, int64_t(full.size()) - max_length);
    prep[i].input.assign(full.begin() + drop, full.end());
    for (size_t j = 0; j < r.continuation.size(); ++j) {
      const int64_t pos = int64_t(r.context.size() + j) - 1 - drop;
      if (pos < 0) continue;
      prep[i].positions.push_back(pos);
      prep[i].targets.push_back(r.continuation[j]);
    }
  }
  // Longest first, so a batch's padding is small and the first batch shows peak memory.
  std::vector<size_t> order(reqs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return prep[a].input.size() > prep[b].input.size();
  });

  std::vector<double> out(reqs.size(), 0.0);
  for (size_t start = 0; start < order.size(); start += batch_size) {
    const size_t end = std::min(order.size(), start + size_t(batch_size));
    int64_t T = 0;
    for (size_t k = start; k < end; ++k) T = std::max<int64_t>(T, prep[order[k]].input.size());
    if (T == 0) continue;
    const int64_t B = int64_t(end - start);
    // Right padding: causal attention keeps it from changing any scored position.
    auto ids = torch::zeros({B, T}, torch::kInt64);
    auto ids_a = ids.accessor<int64_t, 2>();
    std::vector<int64_t> flat, targets, owner;
    for (int64_t b = 0; b < B; ++b) {
      const auto& p = prep[order[start + b]];
      for (size_t t = 0; t < p.input.size(); ++t) ids_a[b][t] = p.input[t];
      for (size_t j = 0; j < p.positions.size(); ++j) {
        flat.push_back(b * T + p.positions[j]);
        targets.push_back(p.targets[j]);
        owner.push_back(b);
      }
    }
    if (flat.empty()) continue;
    auto h = lm.hidden(ids.to(device));
    h = h.reshape({B * T, h.size(-1)}).index_select(0, torch::tensor(flat).to(device));
    auto logp = torch::log_softmax(lm.head(h).to(torch::kFloat64), -1);
    auto picked = logp.gather(1, torch::tensor(targets).to(device).unsqueeze(1)).squeeze(1);
    auto sums = torch::zeros({B}, torch::kFloat64)
                    .index_add_(0, torch::tensor(owner), picked.to(torch::kCPU));
    auto sums_a = sums.accessor<double, 1>();
    for (int64_t b = 0; b < B; ++b) out[order[start + b]] = sums_a[b];
  }
  return out;
}

double option_score(Metric metric, double loglik, const std::string& continuation,
                    double dc_loglik) {
  switch (metric) {
    case Metric::Acc: return loglik;
    // As OLMo: a one-character continuation divides by zero (-inf, never chosen).
    case Metric::LenNorm: return loglik / double(utf8_length(continuation) - 1);
    case Metric::PmiDc: return loglik / dc_loglik;
  }
  return loglik;
}

int64_t argmax(const std::vector<double>& scores) {
  return std::max_element(scores.begin(), scores.end()) - scores.begin();
}

std::string DownstreamResult::metric_key() const {
  return fmt::format("eval/downstream/{}_{}", label, metric_name(metric));
}

std::string DownstreamResult::to_json(int64_t step) const {
  return json_line({{"step", step}, {metric_key(), accuracy},
                    {"eval/downstream/" + label + "_documents", documents}});
}

namespace {

std::vector<int64_t> encode(const tokenizer::Tokenizer& tok, const std::string& text) {
  auto ids = tok.encode(text);
  return {ids.begin(), ids.end()};
}

}  // namespace

DownstreamResult run_downstream(const LanguageModel& lm, const tokenizer::Tokenizer& tok,
                                const Task& task, const DownstreamOptions& options) {
  TORCH_CHECK(options.max_length > 0, "DownstreamOptions.max_length must be set");
  const Metric metric = options.metric.value_or(task.metric);
  std::vector<Request> reqs, dc_reqs;
  for (const auto& d : task.docs)
    for (const auto& o : d.options) {
      auto cont = encode(tok, o.continuation);
      if (cont.empty())
        throw Error(fmt::format("continuation \"{}\" encodes to no tokens", o.continuation),
                    task.name, "every answer option must be non-empty text");
      reqs.push_back({encode(tok, o.context), cont});
      if (metric == Metric::PmiDc) dc_reqs.push_back({encode(tok, o.dc_context), cont});
    }
  const auto ll = continuation_logliks(lm, reqs, options.batch_size, options.max_length,
                                       options.device);
  const auto dc = metric == Metric::PmiDc
                      ? continuation_logliks(lm, dc_reqs, options.batch_size, options.max_length,
                                             options.device)
                      : std::vector<double>(reqs.size(), 1.0);

  DownstreamResult r{task.name, task.label, metric, 0.0, int64_t(task.docs.size()), {}};
  size_t k = 0;
  int64_t correct = 0;
  for (const auto& d : task.docs) {
    std::vector<double> scores;
    for (const auto& o : d.options) {
      scores.push_back(option_score(metric, ll[k], o.continuation, dc[k]));
      ++k;
    }
    r.predictions.push_back(argmax(scores));
    correct += r.predictions.back() == d.gold;
  }
  r.accuracy = double(correct) / double(task.docs.size());
  return r;
}

DownstreamResult run_downstream(model::TransformerImpl& model, const tokenizer::Tokenizer& tok,
                                const Task& task, DownstreamOptions options) {
  if (options.max_length <= 0) options.max_length = model.config().max_sequence_length;
  // An id past the embedding table would fail deep inside the forward pass.
  if (tok.max_token_id() >= model.config().vocab_size)
    throw Error(fmt::format("the tokenizer's ids go up to {}, past the model's vocab_size {}",
                            tok.max_token_id(), model.config().vocab_size),
                tok.path(), "evaluate with the tokenizer the model was trained with (tokenizer.identifier)");
  const bool was_training = model.is_training();
  model.eval();
  DownstreamResult r;
  try {
    r = run_downstream(language_model(model), tok, task, options);
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return r;
}

}  // namespace siamese::eval
