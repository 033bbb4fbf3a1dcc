#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "siamese/common/error.h"
#include "siamese/data/arithmetic.h"
#include "siamese/data/batch_order.h"
#include "siamese/data/token_dataset.h"

namespace fs = std::filesystem;
using siamese::Error;
using namespace siamese::data;
using siamese::config::TokenDtype;
namespace config = siamese::config;

namespace {

fs::path temp_dir() {
  auto d = fs::temp_directory_path() / ("siamese_data_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

template <class T>
fs::path write_raw(const std::string& name, const std::vector<T>& v) {
  auto p = temp_dir() / name;
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  return p;
}

// A version-1 NPY file as numpy.save writes it.
fs::path write_npy_u32(const std::string& name, const std::vector<uint32_t>& v, size_t promised = 0) {
  std::string header = "{'descr': '<u4', 'fortran_order': False, 'shape': (" +
                       std::to_string(promised ? promised : v.size()) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  auto p = temp_dir() / name;
  std::ofstream f(p, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = header.size();
  f.write(reinterpret_cast<const char*>(&len), 2);
  f << header;
  f.write(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  return p;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TokenDataset, CutsEachFileIntoFixedLengthInstancesDroppingTheRemainder) {
  std::vector<uint16_t> a(23), b(9);
  for (int i = 0; i < 23; ++i) a[i] = 1000 + i;
  for (int i = 0; i < 9; ++i) b[i] = 2000 + i;
  auto pa = write_raw("a.npy", a), pb = write_raw("b.npy", b);
  TokenDataset ds({pa.string(), pb.string()}, config::TokenDtype::Uint16, 4, 50304);
  EXPECT_EQ(ds.size(), 5 + 2);  // 23/4 = 5 from a, 9/4 = 2 from b
  auto x = ds.batch({0, 4, 5, 6});
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(x[0][0].item<int64_t>(), 1000);
  EXPECT_EQ(x[1][3].item<int64_t>(), 1019);
  EXPECT_EQ(x[2][0].item<int64_t>(), 2000);  // files do not run into each other
  EXPECT_EQ(x[3][3].item<int64_t>(), 2007);
}

TEST(TokenDataset, ReadsTrueNpyFilesAndUint32) {
  std::vector<uint32_t> v(12);
  for (int i = 0; i < 12; ++i) v[i] = 70000 + i;  // above uint16 range
  auto p = write_npy_u32("with_header.npy", v);
  TokenDataset ds({p.string()}, config::TokenDtype::Uint32, 6, 100000);
  ASSERT_EQ(ds.size(), 2);
  auto x = ds.batch({1, 0});
  EXPECT_EQ(x[0][0].item<int64_t>(), 70006);
  EXPECT_EQ(x[1][5].item<int64_t>(), 70005);
  EXPECT_NE(
      error_of([&] { TokenDataset({p.string()}, config::TokenDtype::Uint16, 6, 100000); }).find("dtype"),
      std::string::npos);
}

// A header that promises more tokens than the file holds (a cut copy) is refused, not read
// past; so is a token file read with another dtype than its sidecar says.
TEST(TokenDataset, HeadersAndSidecarsMustAgreeWithTheFile) {
  std::vector<uint32_t> v(12, 7);
  auto cut = write_npy_u32("cut.npy", v, 1000);
  auto msg = error_of([&] { TokenDataset({cut.string()}, config::TokenDtype::Uint32, 6, 100); });
  EXPECT_NE(msg.find("promises 1000 tokens, the file holds 12"), std::string::npos) << msg;
  EXPECT_NE(msg.find(cut.string()), std::string::npos) << msg;

  auto raw = write_raw<uint32_t>("tokens_u32.npy", v);
  std::ofstream(raw.string() + ".json") << R"({"format": "siamese-tokens-v1", "dtype": "uint32", "tokens": 12,
    "documents": 1, "skipped_documents": 0, "eos_id": 0, "tokenizer": "t", "tokenizer_sha256": "",
    "vocab_size": 100, "input_bytes": 1, "sources": []})";
  msg = error_of([&] { TokenDataset({raw.string()}, config::TokenDtype::Uint16, 6, 100); });
  EXPECT_NE(msg.find("the sidecar says the tokens are uint32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.memmap_dtype: uint32"), std::string::npos) << msg;
  EXPECT_EQ(TokenDataset({raw.string()}, config::TokenDtype::Uint32, 6, 100).size(), 2);
}

TEST(TokenDataset, BadFilesFailNamingTheFile) {
  auto missing = (temp_dir() / "missing.npy").string();
  auto msg = error_of([&] { TokenDataset({missing}, config::TokenDtype::Uint16, 4, 100); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;

  auto empty = write_raw<uint16_t>("empty.npy", {}).string();
  msg = error_of([&] { TokenDataset({empty}, config::TokenDtype::Uint16, 4, 100); });
  EXPECT_NE(msg.find(empty), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;

  auto odd = write_raw<uint8_t>("odd.npy", {1, 2, 3, 4, 5, 6, 7, 8, 9}).string();
  msg = error_of([&] { TokenDataset({odd}, config::TokenDtype::Uint16, 4, 100); });
  EXPECT_NE(msg.find(odd), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  std::vector<uint16_t> v(8, 5);
  v[6] = 300;
  auto oov = write_raw("oov.npy", v).string();
  TokenDataset ds({oov}, config::TokenDtype::Uint16, 4, 256);
  EXPECT_NO_THROW(ds.batch({0}));
  msg = error_of([&] { ds.batch({1}); });
  EXPECT_NE(msg.find(oov), std::string::npos) << msg;
  EXPECT_NE(msg.find("offset 6"), std::string::npos) << msg;
}

TEST(BatchOrder, IsDeterministicPerSeedAndEpochAndCoversEachEpochOnce) {
  EXPECT_EQ(shuffled_indices(100, 7, 0), shuffled_indices(100, 7, 0));
  EXPECT_NE(shuffled_indices(100, 7, 0), shuffled_indices(100, 7, 1));
  EXPECT_NE(shuffled_indices(100, 7, 0), shuffled_indices(100, 8, 0));

  BatchOrder order(103, 10, 7);  // 10 steps per epoch, 3 instances dropped
  ASSERT_EQ(order.steps_per_epoch(), 10);
  std::set<int64_t> seen;
  for (int s = 0; s < 10; ++s)
    for (auto i : order.rank_batch(s)) seen.insert(i);
  EXPECT_EQ(seen.size(), 100u);
  auto epoch1 = order.rank_batch(10);
  auto expected = shuffled_indices(103, 7, 1);
  EXPECT_EQ(epoch1, std::vector<int64_t>(expected.begin(), expected.begin() + 10));
  // Resuming is a fresh object asked for the same step.
  BatchOrder resumed(103, 10, 7);
  EXPECT_EQ(resumed.rank_batch(13), order.rank_batch(13));
}

TEST(BatchOrder, RanksReadDisjointSharesOfTheGlobalBatch) {
  BatchOrder whole(64, 8, 3);
  for (int s = 0; s < 8; ++s) {
    auto global = whole.rank_batch(s);
    std::vector<int64_t> merged(8);
    for (int r = 0; r < 2; ++r) {
      BatchOrder part(64, 8, 3, r, 2);
      auto mine = part.rank_batch(s);
      ASSERT_EQ(mine.size(), 4u);
      for (int k = 0; k < 4; ++k) merged[r + 2 * k] = mine[k];
    }
    EXPECT_EQ(merged, global);
  }
  EXPECT_THROW(BatchOrder(64, 7, 3, 0, 2), Error);
}

TEST(Arithmetic, StreamsAreDeterministicByteLevelAndHeldOutIsDisjoint) {
  for (int digits : {2, 3, 5}) {
    SCOPED_TRACE(digits);
    const int64_t range = digits == 2 ? 100 : digits == 3 ? 1000 : 100000;
    auto a = arithmetic_train_tokens(1, digits, 20000);
    EXPECT_EQ(a, arithmetic_train_tokens(1, digits, 20000));
    EXPECT_NE(a, arithmetic_train_tokens(2, digits, 20000));
    std::string text(a.begin(), a.end());
    std::set<std::string> train_prompts;
    int64_t largest = 0;
    size_t pos = 0;
    for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
      auto line = text.substr(pos, nl - pos);
      auto plus = line.find('+'), eq = line.find('=');
      ASSERT_NE(eq, std::string::npos) << line;
      const int64_t x = std::stoll(line.substr(0, plus)),
                    y = std::stoll(line.substr(plus + 1, eq - plus - 1));
      EXPECT_EQ(x + y, std::stoll(line.substr(eq + 1)));
      largest = std::max({largest, x, y});
      train_prompts.insert(line.substr(0, eq + 1));
    }
    EXPECT_LT(largest, range);
    EXPECT_GE(largest, range / 2);  // operands use the whole range, not a corner of it
    EXPECT_GT(train_prompts.size(), 300u);
    auto held = arithmetic_held_out(1, digits, 200);
    ASSERT_EQ(held.size(), 200u);
    for (const auto& p : held) EXPECT_EQ(train_prompts.count(p.prompt), 0u) << p.prompt;
  }
  // Two-digit operands leave about a tenth of the 10^4 pairs held out; asking for more
  // returns all of them (distinct), rather than drawing forever.
  auto all = arithmetic_held_out(1, 2, 5000);
  EXPECT_GT(all.size(), 800u);
  EXPECT_LT(all.size(), 1200u);
  std::set<std::string> distinct;
  for (const auto& p : all) distinct.insert(p.prompt);
  EXPECT_EQ(distinct.size(), all.size());
}
