#include "siamese/tokenizer/tokenize_corpus.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <sstream>

#include "siamese/common/error.h"
#include "siamese/common/text_input.h"
#include "support/files.h"
#include "support/temp_dir.h"

using siamese::shared_dir;
using siamese::testing::TempDir;
using siamese::testing::tokenizer_path;

using namespace siamese::tokenizer;

namespace {

const Tokenizer& neox() {
  static const Tokenizer t = Tokenizer::from_file(tokenizer_path("olmo-gpt-neox-20b-pii-special"));
  return t;
}

std::string write_gz(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  return path;
}

std::vector<int32_t> with_eos(const std::vector<std::string>& docs, int32_t eos) {
  std::vector<int32_t> all;
  for (const auto& d : docs) {
    auto ids = neox().encode(d);
    all.insert(all.end(), ids.begin(), ids.end());
    if (ids.empty() || ids.back() != eos) all.push_back(eos);
  }
  return all;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const siamese::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TokenizeCorpus, EosAfterEveryJsonlDocument) {
  TempDir dir;
  const std::vector<std::string> docs = {"Hello world", "Zweite Zeile\nmit  Umbruch", "",
                                         "ends with |||IP_ADDRESS|||"};
  std::string jsonl;
  for (const auto& d : docs) jsonl += nlohmann::json({{"id", 1}, {"text", d}}).dump() + "\n";
  TokenizeOptions o;
  o.inputs = {dir.write("in.jsonl", jsonl)};
  o.output = dir.file("out.npy");
  const TokenizeReport r = tokenize_corpus(neox(), o);
  EXPECT_EQ(r.info.eos_id, 50279);  // OLMo-1B's configured EOS for this file
  EXPECT_EQ(r.info.documents, 4);
  TokenFileInfo info;
  const auto ids = read_token_file(o.output, &info);
  const auto want = with_eos(docs, 50279);
  EXPECT_EQ(ids, want);
  EXPECT_EQ(info.tokens, static_cast<int64_t>(want.size()));
  EXPECT_EQ(info.documents, 4);
  EXPECT_EQ(info.dtype, "uint16");
  EXPECT_EQ(info.tokenizer, "olmo-gpt-neox-20b-pii-special");
  // The document that already ends in id 50279 gets no second one (OLMo's rule).
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 50279), 4);
}

TEST(TokenizeCorpus, GzipInputsGiveTheSameTokens) {
  TempDir dir;
  const std::string text = "First paragraph.\n\nSecond  paragraph, with é and 123456.\n";
  const std::string jsonl = "{\"text\": \"a b\"}\n{\"text\": \"c  d\"}\n";
  TokenizeOptions plain, gz;
  plain.inputs = {dir.write("a.txt", text), dir.write("b.jsonl", jsonl)};
  gz.inputs = {write_gz(dir, "a.txt.gz", text), write_gz(dir, "b.jsonl.gz", jsonl)};
  plain.output = dir.file("plain.npy");
  gz.output = dir.file("gz.npy");
  tokenize_corpus(neox(), plain);
  tokenize_corpus(neox(), gz);
  const auto ids = read_token_file(gz.output);
  EXPECT_EQ(ids, read_token_file(plain.output));
  EXPECT_EQ(ids, with_eos({text, "a b", "c  d"}, 50279));
}

TEST(TokenizeCorpus, DocPerLineSkipsBlankLines) {
  TempDir dir;
  TokenizeOptions o;
  o.inputs = {dir.write("a.txt", " = Title = \n \n First line .\n\nSecond\n")};
  o.output = dir.file("out.npy");
  o.doc_per_line = true;
  o.eos_id = 0;
  const auto r = tokenize_corpus(neox(), o);
  EXPECT_EQ(r.info.documents, 3);
  std::vector<int32_t> want;
  for (const char* d : {" = Title = ", " First line .", "Second"}) {
    auto ids = neox().encode(d);
    want.insert(want.end(), ids.begin(), ids.end());
    want.push_back(0);
  }
  EXPECT_EQ(read_token_file(o.output), want);
}

TEST(TokenizeCorpus, MalformedInputStopsWithFileAndLineAndLeavesNothing) {
  TempDir dir;
  const std::string bad_utf8 = dir.write("bad.txt", "line one\nline two\nbad \xC3\x28 byte\n");
  const std::string jsonl =
      dir.write("bad.jsonl",
                "{\"text\": \"ok\"}\n[1, 2]\n{\"body\": \"no text\"}\n{\"text\": 5}\n{broken\n"
                "{\"text\": \"ok again\"}\n");
  TokenizeOptions o;
  o.output = dir.file("out.npy");
  o.inputs = {bad_utf8};
  EXPECT_NE(error_of([&] { tokenize_corpus(neox(), o); }).find("bad.txt:3: invalid UTF-8"),
            std::string::npos);
  o.inputs = {jsonl};
  EXPECT_NE(error_of([&] { tokenize_corpus(neox(), o); }).find("bad.jsonl:2: JSON line is not an object"),
            std::string::npos);
  o.doc_per_line = true;
  o.inputs = {bad_utf8};
  EXPECT_NE(error_of([&] { tokenize_corpus(neox(), o); }).find("bad.txt:3:"), std::string::npos);
  // Only the two inputs remain: no token file, sidecar or temporary.
  EXPECT_EQ(dir.count(), 2);
}

TEST(TokenizeCorpus, SkipPolicyCountsMalformedDocuments) {
  TempDir dir;
  const std::string jsonl =
      dir.write("bad.jsonl",
                "{\"text\": \"ok\"}\n[1, 2]\n{\"body\": \"no text\"}\n{\"text\": 5}\n{broken\n"
                "{\"text\": \"bad \xFF\"}\n\n{\"text\": \"ok again\"}\n");
  TokenizeOptions o;
  o.inputs = {jsonl};
  o.output = dir.file("out.npy");
  o.on_error = OnError::Skip;
  const auto r = tokenize_corpus(neox(), o);
  EXPECT_EQ(r.info.documents, 2);
  EXPECT_EQ(r.info.skipped_documents, 5);
  ASSERT_EQ(r.problems.size(), 5u);
  EXPECT_EQ(r.problems[0].where, jsonl + ":2");
  EXPECT_EQ(r.problems[1].what, "missing field \"text\"");
  EXPECT_EQ(r.problems[2].what, "field \"text\" is not a string");
  EXPECT_EQ(r.problems[4].where, jsonl + ":6");
  EXPECT_EQ(read_sidecar(o.output).skipped_documents, 5);
  EXPECT_EQ(read_token_file(o.output), with_eos({"ok", "ok again"}, 50279));
}

TEST(TokenizeCorpus, LongDocumentsCutForThreadsEncodeExactly) {
  // WikiText-2 valid as one document, cut at safe newlines into ~64 KiB parts, must give the
  // same ids as one encode() call, for both regex families.
  const std::string text = siamese::read_text_file(shared_dir() + "/data/wikitext-2/valid.txt");
  for (const char* name : {"olmo-gpt-neox-20b-pii-special", "olmo2-dolma2", "gpt2"}) {
    const Tokenizer tok = Tokenizer::from_file(tokenizer_path(name));
    const auto cuts = tok.safe_cuts(text, 64 << 10);
    EXPECT_GT(cuts.size(), 10u) << name;
    std::vector<int32_t> parts;
    size_t begin = 0;
    for (size_t cut : cuts) {
      tok.encode_append(std::string_view(text).substr(begin, cut - begin), parts);
      begin = cut;
    }
    tok.encode_append(std::string_view(text).substr(begin), parts);
    EXPECT_EQ(parts, tok.encode(text)) << name;
    // The corpus is already NFC, so every tokenizer must give the text back byte for byte.
    EXPECT_TRUE(tok.decode(parts, false) == text) << name;
  }
}

TEST(TokenizeCorpus, ThreadCountDoesNotChangeTokens) {
  TempDir dir;
  const std::string path = shared_dir() + "/data/ptb/ptb.valid.txt";
  TokenizeOptions one, two;
  one.inputs = two.inputs = {path, path};
  one.output = dir.file("one.npy");
  two.output = dir.file("two.npy");
  one.threads = 1;
  two.threads = 2;
  one.doc_per_line = two.doc_per_line = true;
  const auto r = tokenize_corpus(neox(), one);
  tokenize_corpus(neox(), two);
  EXPECT_EQ(r.info.documents, 2 * 3370);
  EXPECT_EQ(read_token_file(one.output), read_token_file(two.output));
}

TEST(TokenizeCorpus, EncodeJsonlWritesIdsPerLine) {
  TempDir dir;
  const std::string in =
      dir.write("in.jsonl", "{\"text\": \"Hello world\"}\n{\"text\": \"a  b<|endoftext|>\"}\n");
  std::ostringstream out;
  EXPECT_EQ(encode_jsonl(neox(), in, out), 2);
  EXPECT_EQ(out.str(), "{\"ids\": [12092, 1533]}\n{\"ids\": [66, 50276, 67, 0]}\n");
  const std::string bad = dir.write("bad.jsonl", "{\"text\": \"x\"}\n{\"txt\": \"y\"}\n");
  std::ostringstream sink;
  EXPECT_NE(error_of([&] { encode_jsonl(neox(), bad, sink); }).find("bad.jsonl:2"), std::string::npos);
}
