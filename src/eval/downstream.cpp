#include "siamese/eval/downstream.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "siamese/common/error.h"
#include "siamese/common/metrics_row.h"

namespace siamese::eval {

LanguageModel language_model(model::TransformerImpl& model) {
  return {[&model](const torch::Tensor& ids) { return model.hidden(ids); },
          [&model](const torch::Tensor& h) { return model.head(h); }, &model};
}

namespace {

// Sums log p(target) over scored rows of hidden states [N, d] into out[owner[i]].
void add_logliks(const LanguageModel& lm, const torch::Tensor& hidden, const std::vector<int64_t>& targets,
                 const std::vector<size_t>& owners, std::vector<double>& out) {
  auto logp = torch::log_softmax(lm.head(hidden).to(torch::kFloat64), -1);
  auto picked = logp.gather(1, torch::tensor(targets).to(hidden.device()).unsqueeze(1)).squeeze(1).cpu();
  auto a = picked.accessor<double, 1>();
  for (size_t i = 0; i < owners.size(); ++i) out[owners[i]] += a[i];
}

// Requests `which`, each read whole: context + continuation[:-1], cut from the left to
// max_length, in right-padded batches (causal attention keeps padding from touching any
// scored position), longest first so padding is small and the first batch shows peak memory.
void score_whole(const LanguageModel& lm, const std::vector<Request>& reqs, const std::vector<size_t>& which,
                 int64_t batch_size, int64_t max_length, torch::Device device, std::vector<double>& out,
                 const std::function<void(int64_t)>& advance) {
  struct Prepared {
    std::vector<int64_t> input;
    std::vector<int64_t> positions, targets;
  };
  std::vector<Prepared> prep(which.size());
  for (size_t i = 0; i < which.size(); ++i) {
    const auto& r = reqs[which[i]];
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
  std::vector<size_t> order(which.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return prep[a].input.size() > prep[b].input.size(); });
  for (size_t start = 0; start < order.size(); start += batch_size) {
    const size_t end = std::min(order.size(), start + size_t(batch_size));
    int64_t T = 0;
    for (size_t k = start; k < end; ++k) T = std::max<int64_t>(T, prep[order[k]].input.size());
    const int64_t B = int64_t(end - start);
    auto ids = torch::zeros({B, std::max<int64_t>(T, 1)}, torch::kInt64);
    auto ids_a = ids.accessor<int64_t, 2>();
    std::vector<int64_t> flat, targets;
    std::vector<size_t> owners;
    for (int64_t b = 0; b < B; ++b) {
      const auto& p = prep[order[start + b]];
      for (size_t t = 0; t < p.input.size(); ++t) ids_a[b][t] = p.input[t];
      for (size_t j = 0; j < p.positions.size(); ++j) {
        flat.push_back(b * T + p.positions[j]);
        targets.push_back(p.targets[j]);
        owners.push_back(which[order[start + b]]);
      }
    }
    if (!flat.empty()) {
      auto h = lm.hidden(ids.to(device));
      h = h.reshape({B * T, h.size(-1)}).index_select(0, torch::tensor(flat).to(device));
      add_logliks(lm, h, targets, owners, out);
    }
    advance(B);
  }
}

// Groups of requests with one context (non-empty, every option fitting max_length): the
// contexts of up to batch_size options are read in one pass into a KV cache, left-padded to
// one length with the padding keys masked; the cache rows are then repeated per option and
// the options' continuation[:-1] are read after them. The context's last position predicts
// every option's first token. Left padding moves a context's absolute positions but not
// its relative ones, which is all RoPE sees; with learned positions only contexts of one
// length share a pass.
void score_shared(const LanguageModel& lm, const std::vector<Request>& reqs,
                  std::vector<std::vector<size_t>> groups, int64_t batch_size, int64_t max_length,
                  torch::Device device, std::vector<double>& out,
                  const std::function<void(int64_t)>& advance) {
  model::TransformerImpl& model = *lm.transformer;
  const bool relative_positions = model.config().rope;
  auto context_length = [&](const std::vector<size_t>& g) { return int64_t(reqs[g.front()].context.size()); };
  auto longest_option = [&](const std::vector<size_t>& g) {
    size_t n = 0;
    for (size_t m : g) n = std::max(n, reqs[m].continuation.size());
    return n;
  };
  // Options are read padded to the longest in their pass, contexts (one row per group, a
  // few times fewer) to theirs: passes group similar option lengths first. With learned
  // positions every context of a pass has one length.
  std::stable_sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
    if (!relative_positions && context_length(a) != context_length(b))
      return context_length(a) > context_length(b);
    if (longest_option(a) != longest_option(b)) return longest_option(a) > longest_option(b);
    return context_length(a) > context_length(b);
  });
  for (size_t start = 0; start < groups.size();) {
    // A pass holds up to batch_size options and, padded, fits the model's window.
    size_t end = start, options = 0;
    int64_t L = 0;  // the longest context of this pass
    size_t longest = 1;
    while (end < groups.size()) {
      const auto& g = groups[end];
      const int64_t next_L = std::max(L, context_length(g));
      const size_t next_longest = std::max(longest, longest_option(g));
      const bool fits = next_L + int64_t(next_longest) - 1 <= max_length;
      const bool same_positions = relative_positions || context_length(g) == context_length(groups[start]);
      if (end > start && (!fits || !same_positions || options + g.size() > size_t(batch_size))) break;
      L = next_L;
      longest = next_longest;
      options += g.size();
      ++end;
    }
    const int64_t G = int64_t(end - start);

    std::vector<int64_t> row_group;  // option row -> its group's row
    std::vector<size_t> members;
    for (int64_t g = 0; g < G; ++g)
      for (size_t m : groups[start + g]) {
        row_group.push_back(g);
        members.push_back(m);
      }
    const int64_t C = int64_t(longest) - 1;  // continuation positions read after the context
    auto contexts = torch::zeros({G, L}, torch::kInt64);
    auto valid = torch::ones({G, L + C}, torch::kBool);
    for (int64_t g = 0; g < G; ++g) {
      const auto& ctx = reqs[groups[start + g].front()].context;
      const int64_t pad = L - int64_t(ctx.size());
      std::copy(ctx.begin(), ctx.end(), contexts[g].data_ptr<int64_t>() + pad);
      valid[g].narrow(0, 0, pad).fill_(false);
    }
    model::KvCache cache(model.config().n_layers, L + C);
    if (!valid.all().item<bool>()) cache.set_keys_valid(valid.to(device));
    model::ForwardOptions fo;
    fo.cache = &cache;
    auto last = model.hidden(contexts.to(device), fo).select(1, L - 1);
    const auto rows = torch::tensor(row_group).to(device);
    std::vector<int64_t> firsts;
    for (size_t m : members) firsts.push_back(reqs[m].continuation.front());
    add_logliks(lm, last.index_select(0, rows), firsts, members, out);

    if (C > 0) {
      cache.select_rows(rows);
      const int64_t N = int64_t(members.size());
      auto ids = torch::zeros({N, C}, torch::kInt64);
      auto ids_a = ids.accessor<int64_t, 2>();
      std::vector<int64_t> flat, targets;
      std::vector<size_t> owners;
      for (int64_t n = 0; n < N; ++n) {
        const auto& cont = reqs[members[n]].continuation;
        for (size_t j = 0; j + 1 < cont.size(); ++j) {
          ids_a[n][j] = cont[j];
          flat.push_back(n * C + int64_t(j));
          targets.push_back(cont[j + 1]);
          owners.push_back(members[n]);
        }
      }
      auto h = model.hidden(ids.to(device), fo);
      h = h.reshape({N * C, h.size(-1)}).index_select(0, torch::tensor(flat).to(device));
      add_logliks(lm, h, targets, owners, out);
    }
    advance(int64_t(members.size()));
    start = end;
  }
}

}  // namespace

std::vector<double> continuation_logliks(const LanguageModel& lm, const std::vector<Request>& reqs,
                                         int64_t batch_size, int64_t max_length, torch::Device device,
                                         const Progress& progress) {
  TORCH_CHECK(batch_size > 0 && max_length > 0, "batch_size and max_length must be positive");
  torch::NoGradGuard no_grad;
  std::vector<double> out(reqs.size(), 0.0);
  int64_t done = 0;
  auto advance = [&](int64_t n) {
    done += n;
    if (progress) progress(done, int64_t(reqs.size()));
  };
  std::vector<size_t> whole;
  std::vector<std::vector<size_t>> groups;
  if (lm.transformer) {
    std::map<std::vector<int64_t>, std::vector<size_t>> by_context;
    for (size_t i = 0; i < reqs.size(); ++i) by_context[reqs[i].context].push_back(i);
    for (auto& [context, members] : by_context) {
      size_t longest = 0, option_tokens = 0;
      for (size_t m : members) {
        longest = std::max(longest, reqs[m].continuation.size());
        option_tokens += reqs[m].continuation.size();
      }
      const bool fits = int64_t(context.size() + longest) - 1 <= max_length;
      // Sharing saves (options - 1) context reads and costs a second, padded pass: worth it
      // when the saving is at least what the options read (not for a short question with
      // long answers, PIQA's shape; measured in docs/results.md).
      const bool saves = (members.size() - 1) * context.size() >= option_tokens;
      const bool nonempty = std::none_of(members.begin(), members.end(),
                                         [&](size_t m) { return reqs[m].continuation.empty(); });
      if (members.size() > 1 && !context.empty() && fits && saves && nonempty)
        // pmi_dc's domain string is the context of every option of a task: cut into
        // batches, each reading it once.
        for (size_t first = 0; first < members.size(); first += size_t(batch_size))
          groups.emplace_back(members.begin() + first,
                              members.begin() + std::min(members.size(), first + size_t(batch_size)));
      else
        whole.insert(whole.end(), members.begin(), members.end());
    }
    std::sort(whole.begin(), whole.end());
  } else {
    whole.resize(reqs.size());
    std::iota(whole.begin(), whole.end(), 0);
  }
  score_whole(lm, reqs, whole, batch_size, max_length, device, out, advance);
  if (!groups.empty())
    score_shared(lm, reqs, std::move(groups), batch_size, max_length, device, out, advance);
  return out;
}

double option_score(Metric metric, double loglik, const std::string& continuation, double dc_loglik) {
  switch (metric) {
    case Metric::Acc:
      return loglik;
    // As OLMo: a one-character continuation divides by zero (-inf, never chosen).
    case Metric::LenNorm:
      return loglik / double(utf8_length(continuation) - 1);
    case Metric::PmiDc:
      return loglik / dc_loglik;
  }
  return loglik;
}

int64_t argmax(const std::vector<double>& scores) {
  return std::max_element(scores.begin(), scores.end()) - scores.begin();
}

std::string DownstreamResult::metric_key() const {
  return fmt::format("{}{}_{}", metric::kDownstreamPrefix, label, metric_name(metric));
}

MetricsRow DownstreamResult::to_row(int64_t step) const {
  return metrics_row(
      step, "",
      {{metric_key(), accuracy},
       {std::string(metric::kDownstreamPrefix) + label + metric::kDocumentsSuffix, documents}});
}

namespace {

std::vector<int64_t> encode(const tokenizer::Tokenizer& tok, const std::string& text) {
  auto ids = tok.encode(text);
  return {ids.begin(), ids.end()};
}

}  // namespace

DownstreamResult run_downstream(const LanguageModel& lm, const tokenizer::Tokenizer& tok, const Task& task,
                                const DownstreamOptions& options) {
  TORCH_CHECK(options.max_length > 0, "DownstreamOptions.max_length must be set");
  const Metric metric = options.metric.value_or(task.metric);
  std::vector<Request> reqs, dc_reqs;
  for (const auto& d : task.docs)
    for (const auto& o : d.options) {
      auto cont = encode(tok, o.continuation);
      if (cont.empty())
        throw Error(fmt::format("continuation \"{}\" encodes to no tokens", o.continuation), task.name,
                    "every answer option must be non-empty text");
      reqs.push_back({encode(tok, o.context), cont});
      if (metric == Metric::PmiDc) dc_reqs.push_back({encode(tok, o.dc_context), cont});
    }
  LanguageModel scorer = lm;
  if (!options.share_contexts) scorer.transformer = nullptr;
  const int64_t total = int64_t(reqs.size() + dc_reqs.size());
  auto report = [&](int64_t offset) -> Progress {
    if (!options.progress) return {};
    return [&, offset](int64_t done, int64_t) { options.progress(offset + done, total); };
  };
  const auto ll =
      continuation_logliks(scorer, reqs, options.batch_size, options.max_length, options.device, report(0));
  const auto dc = metric == Metric::PmiDc
                      ? continuation_logliks(scorer, dc_reqs, options.batch_size, options.max_length,
                                             options.device, report(int64_t(reqs.size())))
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
