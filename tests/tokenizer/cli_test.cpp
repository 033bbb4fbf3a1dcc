// `siamese tokenize` / `siamese detokenize` end to end through the built binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>

#include "siamese/tokenizer/token_file.h"
#include "siamese/tokenizer/tokenizer.h"
#include "support/files.h"
#include "support/process.h"
#include "support/temp_dir.h"

using siamese::testing::TempDir;
using siamese::testing::tokenizer_path;

using namespace siamese::tokenizer;

namespace {

struct Result {
  int exit_code;
  std::string output;  // stdout and stderr
};

Result run(const std::string& args) {
  static const TempDir scratch;
  const auto r = siamese::testing::run_siamese(args, scratch.path());
  return {r.exit_code, r.output + r.err};
}

const std::string kNeox = tokenizer_path("olmo-gpt-neox-20b-pii-special");

}  // namespace

TEST(Cli, TokenizeThenDetokenize) {
  TempDir dir;
  const std::string jsonl =
      dir.write("a.jsonl", "{\"text\": \"Hello  world\"}\n{\"text\": \"e\\u0301 <|endoftext|>\"}\n");
  const std::string txt = dir.write("b.txt", "Second file.\nTwo lines.\n");
  const std::string out = dir.file("data/train/out.npy");  // its folders are created
  const Result r = run("tokenize --tokenizer " + kNeox + " " + jsonl + " " + txt + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("MB/s"), std::string::npos) << r.output;
  // The progress line, complete at the end (bytes of both files, tokens written).
  EXPECT_NE(r.output.find("tokenize [########################] 0.0/0.0 MB"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" tokens, took "), std::string::npos) << r.output;
  TokenFileInfo info;
  const auto ids = read_token_file(out, &info);
  const Tokenizer tok = Tokenizer::from_file(kNeox);
  std::vector<int32_t> want;
  for (const char* d : {"Hello  world", "e\u0301 <|endoftext|>", "Second file.\nTwo lines.\n"}) {
    tok.encode_append(d, want);
    want.push_back(50279);
  }
  EXPECT_EQ(ids, want);
  EXPECT_EQ(info.documents, 3);
  EXPECT_EQ(info.sources, (std::vector<std::string>{jsonl, txt}));

  const Result text = run("detokenize --tokenizer " + kNeox + " " + out + " --show-special");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(text.output,
            "Hello  world|||IP_ADDRESS|||\u00e9 <|endoftext|>|||IP_ADDRESS|||Second file.\nTwo lines.\n"
            "|||IP_ADDRESS|||");
  const Result limited = run("detokenize --tokenizer " + kNeox + " " + out + " --limit 4");
  EXPECT_EQ(limited.output, "Hello  world|||IP_ADDRESS|||\n");
}

TEST(Cli, MalformedInputStopsOrSkips) {
  TempDir dir;
  const std::string jsonl =
      dir.write("bad.jsonl", "{\"text\": \"ok\"}\n\"just a string\"\n{\"text\": \"ok\"}\n");
  const std::string out = dir.file("out.npy");
  const Result stop = run("tokenize --tokenizer " + kNeox + " " + jsonl + " -o " + out);
  EXPECT_EQ(stop.exit_code, 2);
  EXPECT_NE(stop.output.find("bad.jsonl:2: JSON line is not an object"), std::string::npos) << stop.output;
  EXPECT_EQ(dir.count(), 1);  // only the input: nothing half-written
  const Result skip = run("tokenize --tokenizer " + kNeox + " " + jsonl + " -o " + out + " --on-error skip");
  EXPECT_EQ(skip.exit_code, 0) << skip.output;
  EXPECT_NE(skip.output.find("skipped: 1"), std::string::npos) << skip.output;
  EXPECT_EQ(read_sidecar(out).documents, 2);
}

TEST(Cli, EncodeJsonl) {
  TempDir dir;
  const std::string in = dir.write("in.jsonl", "{\"text\": \"Hello world\"}\n{\"text\": \"\"}\n");
  const Result r = run("tokenize --tokenizer " + kNeox + " --encode-jsonl " + in);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "{\"ids\": [12092, 1533]}\n{\"ids\": []}\n");
}
