#include "siamese/data/token_dataset.h"

#include <algorithm>

#include "siamese/common/error.h"

namespace siamese::data {

TokenDataset::TokenDataset(const std::vector<std::string>& paths, config::TokenDtype dtype, int64_t seq_len,
                           int64_t vocab_size)
    : seq_len_(seq_len), vocab_size_(vocab_size) {
  if (paths.empty())
    throw Error("no token files given", "data.paths", "list token files or set data.synthetic");
  files_.reserve(paths.size());
  for (const auto& p : paths) files_.emplace_back(p, dtype);
  for (size_t i = 0; i < files_.size(); ++i)
    add_segment(files_[i].path(), static_cast<int>(i), files_[i].size());
}

TokenDataset::TokenDataset(std::string name, std::vector<int64_t> tokens, int64_t seq_len, int64_t vocab_size)
    : memory_(std::move(tokens)), seq_len_(seq_len), vocab_size_(vocab_size) {
  const auto n = static_cast<int64_t>(memory_.size());
  add_segment(std::move(name), -1, n);
}

void TokenDataset::add_segment(std::string name, int file, int64_t num_tokens) {
  const int64_t n = num_tokens / seq_len_;
  if (n == 0)
    throw Error("holds " + std::to_string(num_tokens) + " tokens, fewer than one instance of " +
                    std::to_string(seq_len_),
                name, "use more text or a smaller model.max_sequence_length");
  segments_.push_back({std::move(name), file, num_instances_, n});
  num_instances_ += n;
}

void TokenDataset::read_instance(int64_t index, int64_t* dst) const {
  TORCH_CHECK(index >= 0 && index < num_instances_, "instance ", index, " out of range");
  auto it = std::upper_bound(segments_.begin(), segments_.end(), index,
                             [](int64_t i, const Segment& s) { return i < s.first_instance; });
  const Segment& seg = *(it - 1);
  const int64_t start = (index - seg.first_instance) * seq_len_;
  if (seg.file >= 0)
    files_[seg.file].copy_to(dst, start, seq_len_);
  else
    std::copy_n(memory_.data() + start, seq_len_, dst);
  for (int64_t i = 0; i < seq_len_; ++i) {
    if (dst[i] < 0 || dst[i] >= vocab_size_)
      throw Error("token id " + std::to_string(dst[i]) + " at token offset " + std::to_string(start + i) +
                      " is outside the vocabulary (vocab_size " + std::to_string(vocab_size_) + ")",
                  seg.name, "tokenize with the model's tokenizer or raise model.vocab_size / embedding_size");
  }
}

torch::Tensor TokenDataset::batch(const std::vector<int64_t>& indices) const {
  auto out = torch::empty({static_cast<int64_t>(indices.size()), seq_len_}, torch::kInt64);
  int64_t* p = out.data_ptr<int64_t>();
  for (size_t r = 0; r < indices.size(); ++r) read_instance(indices[r], p + r * seq_len_);
  return out;
}

}  // namespace siamese::data

#include "siamese/data/arithmetic.h"

namespace siamese::data {

namespace {
constexpr int64_t kSyntheticTrainTokens = int64_t{1} << 22;
}

TokenDataset train_dataset(const config::DataSection& d) {
  const int64_t T = d.sequence_length;
  if (!d.data.paths.empty()) return TokenDataset(d.data.paths, d.data.memmap_dtype, T, d.vocab_size);
  if (d.data.synthetic == config::SyntheticCorpus::Arithmetic) {
    if (d.vocab_size < kArithmeticVocab)
      throw Error("the arithmetic corpus is byte-level and needs vocab_size >= 256", "model.vocab_size",
                  "set model.vocab_size and embedding_size to 256");
    return TokenDataset(
        "synthetic arithmetic",
        arithmetic_train_tokens(d.seed, static_cast<int>(d.data.arithmetic_digits), kSyntheticTrainTokens), T,
        d.vocab_size);
  }
  throw Error("no training data: data.paths is empty and data.synthetic is unset", "data.paths",
              "list token files, or set data.synthetic: arithmetic");
}

torch::Tensor spread_sample(const TokenDataset& ds, int64_t n) {
  n = std::min(n, ds.size());
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n; ++i) idx.push_back(i * ds.size() / n);
  return ds.batch(idx);
}

}  // namespace siamese::data
