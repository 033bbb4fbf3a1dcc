#include "siamese/common/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "siamese/common/error.h"

namespace siamese {

namespace {

[[noreturn]] void openssl_failed(const char* call) {
  throw Error(std::string("OpenSSL's ") + call + " failed", "SHA-256",
              "check the libcrypto this binary loads (ldd build/siamese | grep crypto)");
}

}  // namespace

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) openssl_failed("EVP_DigestInit_ex");
}

void Sha256::update(const void* data, size_t size) {
  if (size > 0 && EVP_DigestUpdate(ctx_.get(), data, size) != 1) openssl_failed("EVP_DigestUpdate");
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_.get(), digest, &length) != 1) openssl_failed("EVP_DigestFinal_ex");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 0xF]);
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(std::string("cannot read: ") + std::strerror(errno), path);
  Sha256 h;
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw Error(std::string("cannot read: ") + std::strerror(err), path);
    }
    h.update(buffer.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return h.hex();
}

}  // namespace siamese
