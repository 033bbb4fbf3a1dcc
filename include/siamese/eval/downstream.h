#pragma once
// Zero-shot multiple-choice evaluation as OLMo's downstream evaluator does it
// (olmo/eval/downstream.py ICLMultiChoiceTaskDataset + ICLMetric): the context and each
// continuation are tokenized separately without special tokens; the model reads
// context + continuation[:-1] (cut from the left to the model's context length) and an
// option's log-likelihood is the sum of the log-softmax probabilities of its continuation
// tokens. Requests are sorted by length and run in padded batches; only the hidden states
// at continuation positions go through the LM head, so a 50k vocabulary costs little. The
// answer options of a question share its context: with a transformer the context is read
// once into a KV cache and every option continues from it (the scores equal reading each
// option whole, up to float rounding).
//
// For the trainer (`evaluators: - {label: piqa, type: downstream, data_dir: ...}`):
//   Task task = load_task(label, data_dir);            // once, at start-up
//   DownstreamResult r = run_downstream(model, tok, task, options);
//   metrics_log.write(r.to_row(step));                 // {"step": N, "eval/downstream/piqa_len_norm": ...}
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "siamese/common/metrics_row.h"
#include "siamese/eval/tasks.h"
#include "siamese/model/transformer.h"
#include "siamese/tokenizer/tokenizer.h"

namespace siamese::eval {

// One continuation to score after one context (token ids).
struct Request {
  std::vector<int64_t> context;
  std::vector<int64_t> continuation;
};

// The two halves of a language model: ids [B, T] -> hidden [B, T, d], and hidden [N, d] ->
// logits [N, V]. TransformerImpl::hidden / head in practice; tests pass their own.
struct LanguageModel {
  std::function<torch::Tensor(const torch::Tensor&)> hidden;
  std::function<torch::Tensor(const torch::Tensor&)> head;
  // Set by language_model(): requests with the same context then read it once, through
  // this transformer's KV cache. Unset (a test model, --no-shared-contexts): every request
  // is read whole.
  model::TransformerImpl* transformer = nullptr;
};
LanguageModel language_model(model::TransformerImpl& model);

// Summed log-likelihood of each request's continuation, in request order. Inputs longer
// than max_length keep their last max_length tokens; a continuation token whose predicting
// position falls outside the window (a continuation longer than the window, or an empty
// context) is not counted.
// `progress` (optional) hears (requests scored, requests in all) after each batch.
using Progress = std::function<void(int64_t done, int64_t total)>;
std::vector<double> continuation_logliks(const LanguageModel& lm, const std::vector<Request>& reqs,
                                         int64_t batch_size, int64_t max_length, torch::Device device,
                                         const Progress& progress = {});

// An option's score under `metric` (see Metric); dc_loglik is used by PmiDc only.
double option_score(Metric metric, double loglik, const std::string& continuation, double dc_loglik);
// argmax over scores; the first index wins a tie (numpy argmax, as OLMo).
int64_t argmax(const std::vector<double>& scores);

struct DownstreamOptions {
  int64_t batch_size = 16;
  std::optional<Metric> metric;  // unset = the task's OLMo metric
  torch::Device device = torch::kCPU;
  int64_t max_length = 0;      // 0 = the model's max_sequence_length
  bool share_contexts = true;  // read a context shared by several options once (KV cache)
  Progress progress;           // requests of the task (and of its pmi_dc requests)
};

struct DownstreamResult {
  std::string task;
  std::string label;
  Metric metric = Metric::Acc;
  double accuracy = 0;
  int64_t documents = 0;
  std::vector<int64_t> predictions;  // chosen option per document

  // OLMo's key: "eval/downstream/<label>_<metric>", e.g. eval/downstream/piqa_len_norm.
  std::string metric_key() const;
  // Its metrics.jsonl row: {"step": N, "eval/downstream/<label>_<metric>": acc, ...}.
  MetricsRow to_row(int64_t step) const;
};

// Scores every document of `task` with `lm`; the model is put in eval mode (under
// NoGradGuard) by the TransformerImpl overload, which restores the previous mode.
DownstreamResult run_downstream(const LanguageModel& lm, const tokenizer::Tokenizer& tok, const Task& task,
                                const DownstreamOptions& options);
DownstreamResult run_downstream(model::TransformerImpl& model, const tokenizer::Tokenizer& tok,
                                const Task& task, DownstreamOptions options);

}  // namespace siamese::eval
