// Bad input, through the real binary: token files that are not files or shrink while read,
// tokenize outputs that would destroy data, truncated gzip, values no setting means. Each
// must fail with the project's problem / where / fix message and a non-zero exit, no stack
// trace and no signal, leaving the files it was given as they were.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <random>

#include "siamese/common/json_line.h"
#include "siamese/common/shared_dir.h"
#include "siamese/eval/evaluators.h"
#include "siamese_process.h"

using namespace siamese;
using namespace siamese::testing;

namespace {

// Refused: exit 2 (siamese::Error), the message, a fix line, and no trace of a crash.
void expect_refused(const Outcome& out, const std::string& message) {
  EXPECT_EQ(out.exit_code, 2) << out.output;
  EXPECT_EQ(out.signal, 0);
  EXPECT_NE(out.output.find(message), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("\n  fix: "), std::string::npos) << out.output;
  EXPECT_EQ(out.output.find("Exception raised from"), std::string::npos) << out.output;
}

// `tokens` random byte-level ids (uint16) for a tiny run's data.paths.
fs::path token_file(const fs::path& path, size_t tokens) {
  std::vector<uint16_t> ids(tokens);
  std::mt19937 rng(1);
  for (auto& id : ids) id = uint16_t(rng() % 256);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 2));
  return path;
}

TrainConfig on_files(const fs::path& folder, const std::vector<std::string>& paths) {
  TrainConfig c = tiny(folder);
  c.data.synthetic = "";
  c.data.paths = paths;
  c.max_duration = "2";
  return c;
}

std::string tokenizer_file() { return shared_dir() + "/tokenizers/gpt2.json"; }

}  // namespace

// A FIFO used to hang the trainer at open; a directory, a file cut mid-token: each named.
TEST(DataFiles, NonRegularAndTruncatedFilesAreRefusedAtOpen) {
  const auto root = scratch("data_open");
  const fs::path fifo = root / "fifo.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_directories(root / "dir.npy");
  token_file(root / "odd.npy", 1000);
  fs::resize_file(root / "odd.npy", 1999);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fifo.string(), "token file is not a regular file"},
      {(root / "dir.npy").string(), "token file is a directory"},
      {(root / "odd.npy").string(), "token file is truncated: 1999 bytes is not a multiple of 2"},
  };
  for (const auto& [path, message] : cases) {
    SCOPED_TRACE(path);
    const auto c = on_files(root / ("run_" + fs::path(path).stem().string()), {path});
    expect_refused(run_siamese(train_args(c), root / "open.log", {-1, 60}), path + ": " + message);
  }
}

// A token file cut short while the trainer reads it: an error naming the file and both
// sizes, where the memory map used to end the process with SIGBUS.
TEST(DataFiles, FileShrinkingWhileTrainingIsAClearError) {
  const auto root = scratch("data_shrink");
  const fs::path data = token_file(root / "train.npy", 1 << 20);
  Child run = start_long_run(on_files(root / "run", {data.string()}), root / "run.log");
  ASSERT_TRUE(run.running());
  fs::resize_file(data, 64);
  const auto out = run.wait();
  expect_refused(out, data.string() + ": token file shrank from 2097152 to 64 bytes while in use");
}

// The tokenizer never writes over its input or an existing output (unless --force), and a
// gzip file cut short fails with nothing written.
TEST(Tokenize, RefusesToOverwriteAndDetectsTruncatedGzip) {
  if (!fs::exists(tokenizer_file())) GTEST_SKIP() << "no " << tokenizer_file();
  const auto root = scratch("tokenize");
  const fs::path input = root / "corpus.txt";
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "line " + std::to_string(i) + " of a corpus that compresses well\n";
  std::ofstream(input) << text;
  auto tokenize = [&](const std::vector<std::string>& extra, const std::string& name) {
    std::vector<std::string> args = {"tokenize", "--tokenizer", tokenizer_file(), "--doc-per-line"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_siamese(args, root / (name + ".log"));
  };
  expect_refused(tokenize({input.string(), "-o", input.string()}, "same"),
                 input.string() + ": the output would overwrite the input " + input.string());
  expect_refused(tokenize({input.string(), "-o", (root / "." / "corpus.txt").string()}, "same_spelled"),
                 "the output would overwrite the input");
  EXPECT_EQ(read_all(input), text);

  const fs::path out = root / "corpus.npy";
  std::ofstream(out) << "precious";
  expect_refused(tokenize({input.string(), "-o", out.string()}, "exists"),
                 out.string() + ": the output exists");
  EXPECT_EQ(read_all(out), "precious");
  const auto forced = tokenize({input.string(), "-o", out.string(), "--force"}, "forced");
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(read_all(out), "precious");

  // Compress, then cut the gzip file in its middle.
  const fs::path gz = root / "corpus.txt.gz";
  gzFile g = gzopen(gz.c_str(), "wb");
  gzwrite(g, text.data(), unsigned(text.size()));
  gzclose(g);
  fs::resize_file(gz, fs::file_size(gz) / 2);
  const fs::path from_gz = root / "from_gz.npy";
  expect_refused(tokenize({gz.string(), "-o", from_gz.string()}, "gz"),
                 gz.string() + ": gzip file is truncated");
  EXPECT_EQ(entries(root),
            (std::vector<std::string>{"corpus.npy", "corpus.npy.json", "corpus.txt", "corpus.txt.gz",
                                      "exists.log", "forced.log", "gz.log", "same.log", "same_spelled.log"}));
}

// Numbers no setting means, malformed or unreadable configs, out-of-range command-line
// values: each refused before any work, naming the key or the file.
TEST(BadValues, RefusedWithWhereAndFix) {
  const auto root = scratch("values");
  const auto c = tiny(root / "run");
  const auto args = train_args(c);
  int cases = 0;
  for (const char* lr : {"inf", "1e400", "nan", "-inf"}) {
    SCOPED_TRACE(lr);
    auto a = args;
    a.push_back(std::string("--optimizer.learning_rate=") + lr);
    expect_refused(run_siamese(a, root / "lr.log"),
                   std::string("(optimizer.learning_rate): expected a finite number, got \"") + lr + "\"");
    ++cases;
  }
  auto betas = args;
  betas.push_back("--optimizer.betas=[0.9, 1e999]");
  expect_refused(run_siamese(betas, root / "betas.log"), "(optimizer.betas[1]): expected a finite number");
  auto huge = args;  // finite, but AdamW's float32 step overflows (LibTorch failed mid-step)
  huge.push_back("--optimizer.learning_rate=1e39");
  expect_refused(run_siamese(huge, root / "huge.log"),
                 "(optimizer.learning_rate): optimizer.learning_rate 1e+39 is too large for float32 weights");
  cases += 2;

  // Deeply nested YAML, a config that is a directory, one nested where a number belongs.
  std::ofstream(root / "nested.yaml") << "model: " << std::string(20000, '[') << "\n";
  expect_refused(run_siamese({"train", (root / "nested.yaml").string()}, root / "nested.log"),
                 "invalid YAML");
  fs::create_directories(root / "dir.yaml");
  expect_refused(run_siamese({"train", (root / "dir.yaml").string()}, root / "dir.log"),
                 "config file not found");
  std::ofstream(root / "deep.yaml") << "model:\n  d_model:\n    size: 32\n";
  expect_refused(run_siamese({"train", (root / "deep.yaml").string()}, root / "deep.log"),
                 "(model.d_model): expected an integer, got a mapping");
  cases += 3;

  // --batch-size 0 (eval, analyze): refused by the command line parser, before any work.
  for (const char* command : {"eval", "analyze"}) {
    const auto out =
        run_siamese({command, c.save_folder, "--data", "x", "--batch-size", "0"}, root / "bs.log");
    EXPECT_NE(out.exit_code, 0);
    EXPECT_NE(out.output.find("--batch-size: Value 0 not in range"), std::string::npos) << out.output;
    ++cases;
  }
  EXPECT_EQ(cases, 11);
}

// An eval whose tokenizer has ids past the model's vocabulary used to end in a raw stack
// trace from the embedding lookup.
TEST(BadValues, EvalTokenizerLargerThanTheModelVocabulary) {
  if (!fs::exists(tokenizer_file())) GTEST_SKIP() << "no " << tokenizer_file();
  const auto root = scratch("eval_vocab");
  auto c = tiny(root / "run");
  c.max_duration = "1";
  ASSERT_EQ(run_siamese(train_args(c), root / "train.log").exit_code, 0);
  const fs::path tasks = root / "tasks";
  fs::create_directories(tasks);
  fs::copy(shared_dir() + "/evals/piqa.jsonl", tasks / "piqa.jsonl");
  expect_refused(run_siamese({"eval", c.save_folder, "--tokenizer", tokenizer_file(), "--tasks", "piqa",
                              "--data-dir", tasks.string(), "--limit", "2", "--no-metrics"},
                             root / "eval.log"),
                 tokenizer_file() + ": the tokenizer's ids go up to 50256, past the model's vocab_size 256");
}

// Labels come from configs and may hold quotes: the metrics line stays JSON.
TEST(Metrics, LabelsWithQuotesStayValidJson) {
  eval::EvalResult r{"va\"l\\id", 1.5, 10, std::nullopt, std::nullopt, {}};
  const auto j = nlohmann::json::parse(json_line(r.to_row(7)));
  EXPECT_EQ(j["label"], "va\"l\\id");
  EXPECT_EQ(j["step"], 7);
}
