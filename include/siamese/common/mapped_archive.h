#pragma once
// The tensors of a file torch::serialize::OutputArchive wrote, mapped instead of read.
// InputArchive::load_from reads every tensor of the file into memory before the first is
// used, so resuming OLMo-1B held its 14 GB of checkpoint beside its 14 GB of live state and
// was killed for memory on a 24 GiB machine. Here a tensor's bytes stay in the page cache
// until they are copied, and those pages can be dropped under pressure: opening a file costs
// its pickled index only. The file format is unchanged (torch.jit.load still reads it).
#include <torch/torch.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace siamese {

class MappedArchive {
 public:
  // Maps `path` and reads its index; a file that is not such an archive throws siamese::Error
  // naming it.
  explicit MappedArchive(const std::string& path);

  // The tensor stored under `key`, a view of the mapping: copy it to keep it past this
  // archive's use; writes to it go to private pages, never to the file.
  std::optional<torch::Tensor> find(const std::string& key) const;
  std::vector<std::string> keys() const;
  // Bytes of the file's tensors the mapping backs (for the load's accounting).
  int64_t mapped_bytes() const;

 private:
  std::shared_ptr<void> mapping_;
  std::map<std::string, torch::Tensor> tensors_;
  int64_t mapped_bytes_ = 0;
};

}  // namespace siamese
