#include "siamese/tokenizer/token_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "siamese/common/error.h"
#include "support/temp_dir.h"

using siamese::testing::TempDir;

using namespace siamese::tokenizer;

TEST(TokenFile, RoundTripUint16WithSidecar) {
  TempDir dir;
  const std::string path = dir.file("t.npy");
  const std::vector<int32_t> ids = {0, 1, 65535, 50279, 12092};
  {
    TokenFileWriter w(path, "uint16");
    w.append(ids.data(), 3);
    w.append(ids.data() + 3, 2);
    TokenFileInfo info;
    info.documents = 2;
    info.eos_id = 50279;
    info.tokenizer = "neox";
    info.sources = {"a.txt", "b.txt"};
    w.commit(info);
  }
  EXPECT_EQ(std::filesystem::file_size(path), ids.size() * 2);  // raw, no header
  TokenFileInfo info;
  EXPECT_EQ(read_token_file(path, &info), ids);
  EXPECT_EQ(info.dtype, "uint16");
  EXPECT_EQ(info.tokens, 5);
  EXPECT_EQ(info.documents, 2);
  EXPECT_EQ(info.eos_id, 50279);
  EXPECT_EQ(info.sources, (std::vector<std::string>{"a.txt", "b.txt"}));
  EXPECT_EQ(read_raw_tokens(path, "uint16", 2, 2), (std::vector<int32_t>{65535, 50279}));
  EXPECT_EQ(dir.count(), 2);  // the token file and its sidecar, no temporaries
}

TEST(TokenFile, Uint32ForLargeVocabularies) {
  EXPECT_EQ(dtype_for(50279), "uint16");
  EXPECT_EQ(dtype_for(65535), "uint16");
  EXPECT_EQ(dtype_for(100277), "uint32");
  TempDir dir;
  const std::string path = dir.file("t.npy");
  const std::vector<int32_t> ids = {100277, 7, 100257};
  {
    TokenFileWriter w(path, "uint32");
    w.append(ids.data(), ids.size());
    w.commit({});
  }
  EXPECT_EQ(std::filesystem::file_size(path), 12u);
  EXPECT_EQ(read_token_file(path), ids);
}

TEST(TokenFile, UncommittedWriterLeavesNothing) {
  TempDir dir;
  {
    TokenFileWriter w(dir.file("t.npy"), "uint16");
    const int32_t id = 5;
    w.append(&id, 1);
  }
  EXPECT_EQ(dir.count(), 0);
}

TEST(TokenFile, IdTooLargeForDtypeIsAnError) {
  TempDir dir;
  TokenFileWriter w(dir.file("t.npy"), "uint16");
  const int32_t id = 70000;
  EXPECT_THROW(w.append(&id, 1), siamese::Error);
}

TEST(TokenFile, TruncatedFileDisagreesWithSidecar) {
  TempDir dir;
  const std::string path = dir.file("t.npy");
  const std::vector<int32_t> ids = {1, 2, 3};
  {
    TokenFileWriter w(path, "uint16");
    w.append(ids.data(), ids.size());
    w.commit({});
  }
  std::filesystem::resize_file(path, 4);
  EXPECT_THROW(read_token_file(path), siamese::Error);
}
