#pragma once
// Fixed-length training instances cut from token streams the way OLMo's MemMapDataset
// does: each file is split into consecutive chunks of max_sequence_length tokens (the
// remainder of a file is dropped), and instances are numbered file after file.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "siamese/data/mapped_tokens.h"

namespace siamese::data {

class TokenDataset {
 public:
  // Memory-maps every path. Throws siamese::Error naming the file when one is unusable
  // or too short to hold a single instance.
  TokenDataset(const std::vector<std::string>& paths, config::TokenDtype dtype, int64_t seq_len,
               int64_t vocab_size);
  // An in-memory stream (the synthetic corpus); `name` is used in messages.
  TokenDataset(std::string name, std::vector<int64_t> tokens, int64_t seq_len, int64_t vocab_size);

  int64_t size() const { return num_instances_; }
  int64_t seq_len() const { return seq_len_; }
  // Instances by global index as an int64 tensor [indices.size(), seq_len]. Throws
  // siamese::Error naming file and token offset for an id >= vocab_size.
  torch::Tensor batch(const std::vector<int64_t>& indices) const;

 private:
  struct Segment {
    std::string name;
    int file = -1;  // index into files_, or -1 for memory_
    int64_t first_instance = 0;
    int64_t num_instances = 0;
  };
  void add_segment(std::string name, int file, int64_t num_tokens);
  void read_instance(int64_t index, int64_t* dst) const;

  std::vector<MappedTokens> files_;
  std::vector<int64_t> memory_;
  std::vector<Segment> segments_;
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
