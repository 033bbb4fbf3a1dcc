#include "siamese/eval/generate.h"

#include <fmt/format.h>

#include <ATen/CPUGeneratorImpl.h>

#include "siamese/common/error.h"

namespace siamese::eval {

int64_t choose_token(const torch::Tensor& logits, const Sampling& s, at::Generator& rng) {
  if (s.temperature <= 0.0) return logits.argmax().item<int64_t>();
  auto scaled = logits.to(torch::kCPU, torch::kFloat) / s.temperature;
  auto [sorted, order] = scaled.sort(/*dim=*/-1, /*descending=*/true);
  auto probs = torch::softmax(sorted, -1);
  auto keep = torch::ones_like(probs, torch::kBool);
  if (s.top_k > 0 && s.top_k < probs.size(0)) keep.slice(0, s.top_k).fill_(false);
  if (s.top_p < 1.0) {
    // A token is dropped once the more likely ones already reach p; the first always stays.
    auto before = probs.cumsum(0) - probs;
    keep &= before < s.top_p;
  }
  probs = probs * keep;
  const int64_t pick = torch::multinomial(probs / probs.sum(), 1, false, rng).item<int64_t>();
  return order[pick].item<int64_t>();
}

std::vector<int64_t> generate(model::TransformerImpl& model, const std::vector<int64_t>& prompt,
                              const Sampling& s, const std::function<void(int64_t)>& on_token) {
  const auto& cfg = model.config();
  if (prompt.empty()) throw Error("the prompt is empty", "generate", "give a prompt of at least one token");
  const int64_t total = int64_t(prompt.size()) + s.max_tokens;
  if (total > cfg.max_sequence_length)
    throw Error(fmt::format("prompt ({} tokens) + max tokens ({}) exceed the model's "
                            "max_sequence_length {}",
                            prompt.size(), s.max_tokens, cfg.max_sequence_length),
                "generate", "lower --max-tokens or shorten the prompt");
  torch::NoGradGuard no_grad;
  const auto device = model.wte->weight.device();
  auto rng = at::make_generator<at::CPUGeneratorImpl>(s.seed);
  auto ids = torch::tensor(prompt, torch::kLong).to(device).unsqueeze(0);
  std::optional<model::KvCache> cache;
  model::ForwardOptions opts;
  if (s.use_cache) {
    cache.emplace(cfg.n_layers, total);
    opts.cache = &*cache;
  }
  std::vector<int64_t> out;
  auto input = ids;
  while (int64_t(out.size()) < s.max_tokens) {
    const auto h = model.hidden(input, opts);
    const auto logits = model.head(h.select(1, h.size(1) - 1)).squeeze(0).slice(0, 0, cfg.vocab_size);
    const int64_t next = choose_token(logits, s, rng);
    out.push_back(next);
    if (on_token) on_token(next);
    if (s.eos && next == *s.eos) break;
    auto next_t = torch::full({1, 1}, next, ids.options());
    ids = torch::cat({ids, next_t}, 1);
    input = s.use_cache ? next_t : ids;
  }
  return out;
}

}  // namespace siamese::eval
