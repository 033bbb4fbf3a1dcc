#pragma once
// One token file mapped into memory, never read whole. OLMo writes token files as raw
// little-endian arrays (memmap convention, often named .npy although headerless); true NPY
// files with a header are accepted too and recognised by their magic bytes.
#include <cstdint>
#include <string>

namespace siamese::data {

// Bytes per token for a data.memmap_dtype value (uint8 | uint16 | uint32 | uint64).
int dtype_width(const std::string& dtype);

class MappedTokens {
 public:
  // Throws siamese::Error naming `path` if it is missing, empty, truncated (size not a
  // multiple of the dtype) or an NPY file whose dtype disagrees with `dtype`.
  MappedTokens(std::string path, const std::string& dtype);
  ~MappedTokens();
  MappedTokens(MappedTokens&& other) noexcept;
  MappedTokens(const MappedTokens&) = delete;
  MappedTokens& operator=(const MappedTokens&) = delete;
  MappedTokens& operator=(MappedTokens&&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return num_tokens_; }
  // Widens tokens [start, start+n) into dst.
  void copy_to(int64_t* dst, int64_t start, int64_t n) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  int width_ = 0;
  int64_t num_tokens_ = 0;
};

}  // namespace siamese::data
