#pragma once
// Fixed-length training instances cut from token streams the way OLMo's MemMapDataset
// does: each file is split into consecutive chunks of max_sequence_length tokens (the
// remainder of a file is dropped), and instances are numbered file after file. A mixture
// (source_mixture.h) numbers the chunks each of its pieces takes, piece after piece.
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "siamese/data/mapped_tokens.h"
#include "siamese/data/source_mixture.h"

namespace siamese::data {

class TokenDataset {
 public:
  // Memory-maps every path. Throws siamese::Error naming the file when one is unusable
  // or too short to hold a single instance.
  TokenDataset(const std::vector<std::string>& paths, config::TokenDtype dtype, int64_t seq_len,
               int64_t vocab_size);
  // An in-memory stream (the synthetic corpus); `name` is used in messages.
  TokenDataset(std::string name, std::vector<int64_t> tokens, int64_t seq_len, int64_t vocab_size);
  // The mixture of `sources` for a run of `requested_tokens` (plan_mixture), each piece's
  // chunks drawn with `seed`.
  TokenDataset(const std::vector<config::MixtureSourceConfig>& sources, config::TokenDtype dtype,
               int64_t seq_len, int64_t vocab_size, int64_t requested_tokens, int64_t global_batch_tokens,
               uint64_t seed);

  int64_t size() const { return num_instances_; }
  int64_t seq_len() const { return seq_len_; }
  // Instances by global index as an int64 tensor [indices.size(), seq_len]. Throws
  // siamese::Error naming file and token offset for an id >= vocab_size.
  torch::Tensor batch(const std::vector<int64_t>& indices) const;

  // The mixture's plan, or null for plain files and the synthetic corpus.
  const MixturePlan* mixture() const { return mixture_ ? &*mixture_ : nullptr; }
  // The mixture source instance `index` comes from.
  int source_of(int64_t index) const { return segment_of(index).source; }

 private:
  struct Segment {
    std::string name;
    int file = -1;  // index into files_, or -1 for memory_
    int64_t first_instance = 0;
    int64_t num_instances = 0;
    std::vector<int64_t> chunks;  // the file's chunks in instance order; empty: all, in order
    int source = 0;
  };
  void add_segment(std::string name, int file, int64_t num_tokens);
  const Segment& segment_of(int64_t index) const;
  void read_instance(int64_t index, int64_t* dst) const;

  std::vector<MappedTokens> files_;
  std::vector<int64_t> memory_;
  std::vector<Segment> segments_;
  std::optional<MixturePlan> mixture_;
  int64_t seq_len_;
  int64_t vocab_size_;
  int64_t num_instances_ = 0;
};

}  // namespace siamese::data

#include "siamese/config/config.h"
#include "siamese/config/sections.h"

namespace siamese::data {

// The run's training instances: data.paths memory-mapped, or the synthetic corpus named by
// data.synthetic when paths is empty.
TokenDataset train_dataset(const config::DataSection& data);

// `n` instances (at most the dataset's) spread evenly over it, index i * size / n: the same
// ones at every call, the sample `siamese analyze` and the trainer's stream statistics read.
torch::Tensor spread_sample(const TokenDataset& ds, int64_t n);

}  // namespace siamese::data
