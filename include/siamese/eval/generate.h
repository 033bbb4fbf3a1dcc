#pragma once
// Text generation from a trained model: greedy decoding or sampling (temperature, top-k,
// top-p) with a seed, stopping at EOS or after max_tokens. With the KV cache (default) the
// prompt is read once and every further step reads one token, so the cost per generated
// token does not grow with the prompt; without it each step re-reads the whole sequence
// (the reference the cache is tested against, and the baseline of `siamese generate --bench`).
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "siamese/model/transformer.h"

namespace siamese::eval {

struct Sampling {
  double temperature = 0.0;  // 0: greedy (argmax)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  double top_p = 1.0;        // keep the smallest set whose probability reaches p
  int64_t max_tokens = 64;
  std::optional<int64_t> eos;  // stop after generating it
  uint64_t seed = 0;
  bool use_cache = true;
};

// The next token from one position's logits [V] under `s` (greedy when temperature is 0).
int64_t choose_token(const torch::Tensor& logits, const Sampling& s, at::Generator& rng);

// Tokens generated after `prompt` (EOS included when reached). `on_token` sees each one as
// it is produced. Ids are limited to the model's vocab_size (padding rows of the embedding
// are never produced). Throws siamese::Error when the prompt is empty or prompt + max_tokens
// exceed max_sequence_length.
std::vector<int64_t> generate(model::TransformerImpl& model, const std::vector<int64_t>& prompt,
                              const Sampling& s, const std::function<void(int64_t)>& on_token = {});

}  // namespace siamese::eval
