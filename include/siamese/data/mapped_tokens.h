#pragma once
// One token file, never read whole: each instance is read with pread when a batch needs it
// (a file cut short underneath then gives an error naming it, where a memory map would
// kill the process with SIGBUS). OLMo writes token files as raw
// little-endian arrays (memmap convention, often named .npy although headerless); true NPY
// files with a header are accepted too and recognised by their magic bytes.
#include <cstdint>
#include <string>

#include "siamese/config/enums.h"

namespace siamese::data {

class MappedTokens {
 public:
  // Throws siamese::Error naming `path` if it is missing, not a regular file (a FIFO would
  // block), empty, truncated (size not a multiple of the dtype) or an NPY file whose dtype
  // disagrees with `dtype`.
  MappedTokens(std::string path, config::TokenDtype dtype);
  ~MappedTokens();
  MappedTokens(MappedTokens&& other) noexcept;
  MappedTokens(const MappedTokens&) = delete;
  MappedTokens& operator=(const MappedTokens&) = delete;
  MappedTokens& operator=(MappedTokens&&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return num_tokens_; }
  // Widens tokens [start, start+n) into dst; throws siamese::Error when the file can no
  // longer be read there (it shrank since it was opened).
  void copy_to(int64_t* dst, int64_t start, int64_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  size_t file_bytes_ = 0;   // at open
  size_t data_offset_ = 0;  // past an NPY header
  int width_ = 0;
  int64_t num_tokens_ = 0;
};

}  // namespace siamese::data
