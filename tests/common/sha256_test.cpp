// SHA-256 through OpenSSL: the FIPS 180-4 example digests, the same digest whatever the
// pieces update() is given in, and sha256_file against Python's hashlib on the same bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "siamese/common/error.h"
#include "siamese/common/sha256.h"
#include "support/process.h"
#include "support/temp_dir.h"

using namespace siamese;

TEST(Sha256, FipsExamplesAndPiecesGiveTheStandardDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The same bytes in pieces of 1, 63, 64, 65 and 4096 bytes, and an empty update between.
  for (size_t piece : {size_t(1), size_t(63), size_t(64), size_t(65), size_t(4096)}) {
    Sha256 h;
    for (size_t at = 0; at < million.size(); at += piece) {
      h.update(million.data() + at, std::min(piece, million.size() - at));
      if (at == 0) h.update(nullptr, 0);
    }
    EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") << piece;
  }
}

TEST(Sha256, AFileHashesAsHashlibHashesIt) {
  siamese::testing::TempDir dir;
  std::string bytes(3 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 2654435761u) >> 13);
  const std::string path = dir.write("data.bin", bytes);
  const std::string log = dir.file("hashlib.log");
  ASSERT_EQ(
      siamese::testing::run_python(
          "-c \"import hashlib,sys;print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())\" " +
              path,
          log)
          .exit_code,
      0)
      << siamese::testing::read_all(log);
  std::string want;
  std::ifstream(log) >> want;
  EXPECT_EQ(sha256_file(path), want);
  EXPECT_THROW(sha256_file(dir.file("missing")), Error);
}
