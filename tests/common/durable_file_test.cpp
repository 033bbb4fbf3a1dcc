// The one writer every file of the project goes through (common/durable_file.h): a failed
// write leaves the earlier file whole, names the file, and leaves no scratch file behind.
#include <gtest/gtest.h>

#include <string>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "support/file_size_limit.h"
#include "support/temp_dir.h"

using namespace siamese;
using siamese::testing::FileSizeLimit;
using siamese::testing::read_all;
using siamese::testing::TempDir;

TEST(DurableFile, ReplacesAFileWholeAndLeavesNothingElse) {
  TempDir dir;
  const std::string path = dir.write("out.json", "old");
  write_file_atomically(path, "new contents");
  EXPECT_EQ(read_all(path), "new contents");
  EXPECT_EQ(dir.count(), 1);
}

TEST(DurableFile, AFullDiskKeepsTheOldFileWholeAndNamesTheFile) {
  TempDir dir;
  const std::string path = dir.write("metrics.jsonl", "the earlier file\n");
  const std::string big(1 << 16, 'x');
  std::string message;
  {
    FileSizeLimit limit(4096);
    try {
      write_file_atomically(path, big);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("MiB free"), std::string::npos) << message;
  EXPECT_EQ(read_all(path), "the earlier file\n");
  EXPECT_EQ(dir.count(), 1) << "a scratch file was left behind";
}

TEST(DurableFile, AStreamThatIsNotCommittedChangesNothing) {
  TempDir dir;
  const std::string path = dir.write("tokens.jsonl", "kept");
  {
    AtomicOstream out(path);
    out << "half of a new file";
  }
  EXPECT_EQ(read_all(path), "kept");
  EXPECT_EQ(dir.count(), 1);
  AtomicOstream out(path);
  out << "line " << 1 << '\n';
  out.commit();
  EXPECT_EQ(read_all(path), "line 1\n");
}

TEST(DurableFile, AnAppendingSinkReportsAFailedWriteAtOnce) {
  TempDir dir;
  const std::string path = dir.write("log", "row 1\n");
  FileSink sink(path, "", FileSink::Mode::Append);
  sink.write(std::string("row 2\n"));
  EXPECT_NO_THROW(sink.check());
  FileSizeLimit limit(16);
  sink.write(std::string(64, 'y'));
  EXPECT_THROW(sink.check(), Error);
  EXPECT_EQ(read_all(path).substr(0, 12), "row 1\nrow 2\n");
}
