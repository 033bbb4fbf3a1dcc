#include "siamese/data/token_dataset.h"

#include <algorithm>
#include <map>

#include "siamese/common/error.h"
#include "siamese/data/batch_order.h"

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

TokenDataset::TokenDataset(const std::vector<config::MixtureSourceConfig>& sources, config::TokenDtype dtype,
                           int64_t seq_len, int64_t vocab_size, int64_t requested_tokens,
                           int64_t global_batch_tokens, uint64_t seed)
    : seq_len_(seq_len), vocab_size_(vocab_size) {
  // A file named by two sources, or listed again for a repetition, is opened once.
  std::map<std::string, int> opened;
  std::vector<std::vector<int>> file_of(sources.size());
  std::vector<std::vector<int64_t>> tokens(sources.size());
  for (size_t s = 0; s < sources.size(); ++s)
    for (const auto& path : sources[s].paths) {
      auto [it, fresh] = opened.emplace(path, int(files_.size()));
      if (fresh) files_.emplace_back(path, dtype);
      file_of[s].push_back(it->second);
      tokens[s].push_back(files_[it->second].size());
    }
  mixture_ = plan_mixture(sources, tokens, requested_tokens, global_batch_tokens, seq_len);
  for (size_t i = 0; i < mixture_->pieces.size(); ++i) {
    const MixturePiece& piece = mixture_->pieces[i];
    if (piece.instances == 0) continue;
    Segment seg{sources[piece.source].paths[piece.path],
                file_of[piece.source][piece.path],
                num_instances_,
                piece.instances,
                {},
                piece.source};
    const int64_t available = piece.file_tokens / seq_len;
    if (piece.instances < available) {
      // A seeded sample spread over the whole file, read in file order.
      seg.chunks = shuffled_indices(available, seed, int64_t(i));
      seg.chunks.resize(size_t(piece.instances));
      std::sort(seg.chunks.begin(), seg.chunks.end());
    }
    num_instances_ += piece.instances;
    segments_.push_back(std::move(seg));
  }
}

void TokenDataset::add_segment(std::string name, int file, int64_t num_tokens) {
  const int64_t n = num_tokens / seq_len_;
  if (n == 0)
    throw Error("holds " + std::to_string(num_tokens) + " tokens, fewer than one instance of " +
                    std::to_string(seq_len_),
                name, "use more text or a smaller model.max_sequence_length");
  segments_.push_back({std::move(name), file, num_instances_, n, {}, 0});
  num_instances_ += n;
}

const TokenDataset::Segment& TokenDataset::segment_of(int64_t index) const {
  TORCH_CHECK(index >= 0 && index < num_instances_, "instance ", index, " out of range");
  auto it = std::upper_bound(segments_.begin(), segments_.end(), index,
                             [](int64_t i, const Segment& s) { return i < s.first_instance; });
  return *(it - 1);
}

void TokenDataset::read_instance(int64_t index, int64_t* dst) const {
  const Segment& seg = segment_of(index);
  const int64_t chunk = index - seg.first_instance;
  const int64_t start = (seg.chunks.empty() ? chunk : seg.chunks[size_t(chunk)]) * seq_len_;
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
  // The chunk samples get a stream of their own, apart from the batch order's epochs.
  if (!d.data.source_mixture.empty())
    return TokenDataset(d.data.source_mixture, d.data.memmap_dtype, T, d.vocab_size, d.requested_tokens,
                        d.global_batch * T, d.seed ^ 0x6d69787475726573ULL);
  if (d.data.synthetic == config::SyntheticCorpus::Arithmetic) {
    if (d.vocab_size < kArithmeticVocab)
      throw Error("the arithmetic corpus is byte-level and needs vocab_size >= 256", "model.vocab_size",
                  "set model.vocab_size and embedding_size to 256");
    return TokenDataset(
        "synthetic arithmetic",
        arithmetic_train_tokens(d.seed, static_cast<int>(d.data.arithmetic_digits), kSyntheticTrainTokens), T,
        d.vocab_size);
  }
  throw Error("no training data: data.paths and data.source_mixture are empty and data.synthetic is unset",
              "data.paths",
              "list token files, weighted sources in data.source_mixture, or set data.synthetic: arithmetic");
}

torch::Tensor spread_sample(const TokenDataset& ds, int64_t n) {
  n = std::min(n, ds.size());
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < n; ++i) idx.push_back(i * ds.size() / n);
  return ds.batch(idx);
}

}  // namespace siamese::data
