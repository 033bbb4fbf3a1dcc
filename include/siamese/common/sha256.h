#pragma once
// SHA-256 (FIPS 180-4): identifies tokenizer files in token-file sidecars and every file of
// a checkpoint in its manifest. Incremental, so gigabyte checkpoint files are hashed while
// they are written or read, never held in memory whole.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace siamese {

class Sha256 {
 public:
  void update(const void* data, size_t size);
  // Lower-case hex digest of everything passed to update(); the hasher is spent after it.
  std::string hex();

 private:
  std::array<uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char block_[64] = {};
  size_t block_used_ = 0;
  uint64_t total_ = 0;
};

// Lower-case hex digest of `data`.
std::string sha256_hex(std::string_view data);

// Lower-case hex digest of a file's bytes; throws siamese::Error naming the file when it
// cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace siamese
