// MappedArchive against LibTorch's own InputArchive on the files OutputArchive writes: the
// same tensors bit for bit (dtypes, views, shared storage, empty ones), opening a large file
// takes no memory for its tensors, writes never reach the file, and a file that is not an
// archive is refused naming it.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "siamese/common/error.h"
#include "siamese/common/mapped_archive.h"
#include "support/temp_dir.h"

using namespace siamese;

namespace {

// Anonymous resident memory of this process (/proc/self/status RssAnon), in bytes.
int64_t rss_anon() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  return -1;
}

}  // namespace

TEST(MappedArchive, ReadsWhatInputArchiveReadsBitForBit) {
  siamese::testing::TempDir dir;
  torch::manual_seed(3);
  const torch::Tensor base = torch::randn({7, 5});
  const std::map<std::string, torch::Tensor> saved = {
      {"blocks.0.weight", torch::randn({33, 17})},
      {"half", torch::randn({9}).to(torch::kBFloat16)},
      {"step", torch::tensor(int64_t(123456789012))},
      {"empty", torch::empty({0, 4})},
      {"transposed", base.t()},
      {"row", base.select(0, 3)},
      {"flag", torch::tensor(true)},
  };
  torch::serialize::OutputArchive out;
  for (const auto& [key, t] : saved) out.write(key, t, /*is_buffer=*/key == "step");
  const std::string path = dir.file("a.pt");
  out.save_to(path);

  torch::serialize::InputArchive reference;
  reference.load_from(path);
  const MappedArchive mapped(path);
  std::vector<std::string> want;
  for (const auto& [key, t] : saved) want.push_back(key);
  EXPECT_EQ(mapped.keys(), want);
  for (const auto& [key, t] : saved) {
    torch::Tensor expected;
    ASSERT_TRUE(reference.try_read(key, expected, key == "step")) << key;
    const auto got = mapped.find(key);
    ASSERT_TRUE(got) << key;
    EXPECT_EQ(got->dtype(), expected.dtype()) << key;
    EXPECT_EQ(got->sizes(), expected.sizes()) << key;
    EXPECT_EQ(got->strides(), expected.strides()) << key;
    EXPECT_TRUE(torch::equal(*got, expected)) << key;
    EXPECT_TRUE(torch::equal(*got, t)) << key;
  }
  // One storage behind the two views of `base`, as in the file.
  EXPECT_TRUE(mapped.find("transposed")->storage().is_alias_of(mapped.find("row")->storage()));
  EXPECT_FALSE(mapped.find("missing"));
}

TEST(MappedArchive, OpeningTakesNoMemoryForTheTensorsAndWritesStayPrivate) {
  siamese::testing::TempDir dir;
  const int64_t n = int64_t(64) << 20;  // 256 MiB of float32
  const std::string path = dir.file("big.pt");
  {
    torch::serialize::OutputArchive out;
    out.write("big", torch::arange(n, torch::kFloat32));
    out.save_to(path);
  }
  const int64_t before = rss_anon();
  ASSERT_GT(before, 0);
  const MappedArchive mapped(path);
  const int64_t opened = rss_anon();
  EXPECT_EQ(mapped.mapped_bytes(), n * 4);
  // The index is a few hundred bytes; reading the tensors would have added 256 MiB.
  EXPECT_LT(opened - before, int64_t(16) << 20) << "RssAnon grew by " << (opened - before) << " bytes";
  torch::Tensor big = *mapped.find("big");
  EXPECT_EQ(big[n - 1].item<float>(), float(n - 1));

  big.narrow(0, 0, 1024).fill_(-1);
  EXPECT_EQ(big[0].item<float>(), -1.0f);
  const MappedArchive again(path);
  EXPECT_EQ((*again.find("big"))[0].item<float>(), 0.0f) << "a write reached the file";
}

TEST(MappedArchive, AFileThatIsNotAnArchiveIsRefusedNamingIt) {
  siamese::testing::TempDir dir;
  const std::string text = dir.write("notes.pt", "these are not tensors\n");
  const std::string empty = dir.write("empty.pt", "");
  for (const auto& path : {text, empty, dir.file("absent.pt")}) {
    try {
      MappedArchive archive(path);
      ADD_FAILURE() << path << " was opened";
    } catch (const Error& e) {
      EXPECT_NE(e.where().find(path), std::string::npos) << e.what();
    }
  }
  // Cut short: the zip directory at the end is gone.
  torch::serialize::OutputArchive out;
  out.write("w", torch::ones({1000}));
  const std::string whole = dir.file("whole.pt");
  out.save_to(whole);
  std::ifstream in(whole, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string cut = dir.write("cut.pt", bytes.substr(0, bytes.size() / 2));
  EXPECT_THROW(MappedArchive{cut}, Error);
}
