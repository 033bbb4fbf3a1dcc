#pragma once
// Perplexity and bits per byte of arbitrary text: each document is read in windows of at
// most `window` tokens that start `stride` tokens apart; every token is scored once, by the
// first window that contains it, so with stride < window each token after the first window
// has at least window - stride tokens of context. A document starts with the model's EOS
// token when it has one (the separator it saw before every training document), so its
// first token is scored too. Bits per byte (nats / ln 2 / UTF-8 bytes) compares models with
// different tokenizers.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "siamese/model/transformer.h"

namespace siamese::eval {

struct TextDocument {
  std::vector<int64_t> ids;  // the text's tokens
  int64_t bytes = 0;         // the text's length in bytes
};

struct TextScore {
  double nll = 0;  // summed negative log-likelihood, nats
  int64_t tokens = 0;
  int64_t bytes = 0;
  int64_t documents = 0;
  double loss() const;           // nats per token
  double perplexity() const;     // exp(loss)
  double bits_per_byte() const;  // nll / ln 2 / bytes
};

struct TextOptions {
  int64_t window = 0;          // 0: the model's max_sequence_length
  int64_t stride = 0;          // 0: window / 2
  std::optional<int64_t> bos;  // token put before each document (the model's EOS)
  // Called after each window and each document with (documents done, tokens scored): a long
  // document shows progress too.
  std::function<void(int64_t, int64_t)> progress;
};

TextScore score_text(model::TransformerImpl& model, const std::vector<TextDocument>& docs,
                     const TextOptions& options);

}  // namespace siamese::eval
