#pragma once
// The built-in synthetic corpus: addition problems written as bytes ("347+85=432\n"), so
// a model can be trained and scored with no files on disk (quickstart, tests). Operands have
// up to `digits` digits (data.arithmetic_digits). Problems are split by a hash of their
// operands: held-out problems never occur in training text.
#include <cstdint>
#include <string>
#include <vector>

namespace siamese::data {

struct ArithmeticProblem {
  std::string prompt;  // "347+85="
  std::string answer;  // "432"
};

// Byte-level vocabulary: token id = byte value.
inline constexpr int64_t kArithmeticVocab = 256;

// The training stream: `num_tokens` bytes of concatenated training problems.
std::vector<int64_t> arithmetic_train_tokens(uint64_t seed, int digits, int64_t num_tokens);
// `count` distinct held-out problems, in a fixed order (fewer if the split has fewer).
std::vector<ArithmeticProblem> arithmetic_held_out(uint64_t seed, int digits, int64_t count);
// Held-out problems as one token stream (for validation loss / perplexity).
std::vector<int64_t> arithmetic_held_out_tokens(uint64_t seed, int digits, int64_t num_tokens);

}  // namespace siamese::data
