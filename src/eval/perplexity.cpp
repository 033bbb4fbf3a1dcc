#include "siamese/eval/perplexity.h"

#include <fmt/format.h>

#include <cmath>

#include "siamese/common/error.h"
#include "siamese/model/lm_loss.h"

namespace siamese::eval {

double TextScore::loss() const { return nll / double(tokens); }
double TextScore::perplexity() const { return std::exp(loss()); }
double TextScore::bits_per_byte() const { return nll / std::log(2.0) / double(bytes); }

namespace {

// The start of the window that scores token t: windows start at 0, stride, 2 stride, ...;
// the first with start + window > t holds t.
int64_t window_start(int64_t t, int64_t window, int64_t stride) {
  const int64_t over = t + 1 - window;
  return over <= 0 ? 0 : (over + stride - 1) / stride * stride;
}

}  // namespace

TextScore score_text(model::TransformerImpl& model, const std::vector<TextDocument>& docs,
                     const TextOptions& o) {
  const auto& cfg = model.config();
  const int64_t window = o.window > 0 ? o.window : cfg.max_sequence_length;
  const int64_t stride = o.stride > 0 ? o.stride : std::max<int64_t>(1, window / 2);
  if (window < 2 || window > cfg.max_sequence_length || stride > window - 1)
    throw Error(fmt::format("window {} and stride {} do not fit a model of max_sequence_length {}", window,
                            stride, cfg.max_sequence_length),
                "eval --text", "use 2 <= window <= max_sequence_length and 1 <= stride < window");
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  const auto device = model.wte->weight.device();
  TextScore score;
  for (const auto& doc : docs) {
    std::vector<int64_t> seq;
    if (o.bos) seq.push_back(*o.bos);
    seq.insert(seq.end(), doc.ids.begin(), doc.ids.end());
    const int64_t n = int64_t(seq.size());
    const auto all = torch::tensor(seq, torch::kLong);
    // Token t is scored in window_start(t)'s window; consecutive windows take the next run.
    for (int64_t first = 1; first < n;) {
      const int64_t begin = window_start(first, window, stride);
      const int64_t end = std::min(n, begin + window);
      const auto ids = all.slice(0, begin, end).to(device).unsqueeze(0);
      // Only positions that predict a scored token go through the LM head.
      const auto h = model.hidden(ids).squeeze(0).slice(0, first - 1 - begin, end - 1 - begin);
      const auto targets = all.slice(0, first, end).to(device);
      score.nll += model::head_loss_sums(model, h, targets).nll.item<double>();
      score.tokens += end - first;
      first = end;
      if (o.progress) o.progress(score.documents, score.tokens);
    }
    score.bytes += doc.bytes;
    ++score.documents;
    if (o.progress) o.progress(score.documents, score.tokens);
  }
  if (was_training) model.train();
  return score;
}

}  // namespace siamese::eval
