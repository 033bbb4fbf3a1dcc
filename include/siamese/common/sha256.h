#pragma once
// SHA-256 (FIPS 180-4): identifies tokenizer files in token-file sidecars and every file of
// a checkpoint in its manifest. Incremental, so gigabyte checkpoint files are hashed while
// they are written or read, never held in memory whole. OpenSSL's libcrypto computes it,
// with the CPU's SHA extensions where it has them (SHA-NI, ARMv8 SHA2); the digests are the
// standard ones, so manifests written before read the same.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace siamese {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  // Lower-case hex digest of everything passed to update(); the hasher is spent after it.
  std::string hex();

 private:
  struct Free {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, Free> ctx_;
};

// Lower-case hex digest of `data`.
std::string sha256_hex(std::string_view data);

// Lower-case hex digest of a file's bytes; throws siamese::Error naming the file when it
// cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace siamese
