// Bad input, through the real binary: token files that are not files or shrink while read,
// tokenize outputs that would destroy data, truncated gzip, values no setting means. Each
// must fail with the project's problem / where / fix message and a non-zero exit, no stack
// trace and no signal, leaving the files it was given as they were.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

#include "siamese/common/json_line.h"
#include "siamese/common/shared_dir.h"
#include "siamese/data/batch_order.h"
#include "siamese/eval/evaluators.h"
#include "siamese/train/trainer.h"
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

config::TrainConfig on_files(const fs::path& folder, const std::vector<std::string>& paths) {
  config::TrainConfig c = tiny(folder);
  c.data.synthetic = config::SyntheticCorpus::None;
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
    expect_refused(run_siamese(train_args(c), root / "open.log", {-1, 60, {}, {}, {}, {}}),
                   path + ": " + message);
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

// Downstream tasks on a byte-level run that names no tokenizer it can find (tokenizer.identifier
// is "gpt2", no file): the message said "pass --tokenizer", which would hand the model ids it
// never saw; it points at --text instead.
TEST(BadValues, EvalTasksOnAByteRunWithoutATokenizerPointAtText) {
  const auto root = scratch("eval_bytes");
  auto c = tiny(root / "run");
  c.max_duration = "1";
  ASSERT_EQ(run_siamese(train_args(c), root / "train.log").exit_code, 0);
  const Outcome out = run_siamese({"eval", c.save_folder, "--tasks", "piqa", "--limit", "2", "--no-metrics"},
                                  root / "eval.log");
  expect_refused(out, "trained on the bytes of a built-in corpus (data.synthetic) and names no tokenizer");
  EXPECT_NE(out.output.find("--text FILE"), std::string::npos) << out.output;
  EXPECT_EQ(out.output.find("pass --tokenizer"), std::string::npos) << out.output;
}

// Labels come from configs and may hold quotes: the metrics line stays JSON.
TEST(Metrics, LabelsWithQuotesStayValidJson) {
  eval::EvalResult r{"va\"l\\id", 1.5, 10, std::nullopt, std::nullopt, {}};
  const auto j = nlohmann::json::parse(json_line(r.to_row(7)));
  EXPECT_EQ(j["label"], "va\"l\\id");
  EXPECT_EQ(j["step"], 7);
}

namespace {

// A refusal that names `path`, says how to fix it, and shows no raw library text.
void expect_clear(const Outcome& out, const std::string& path) {
  EXPECT_NE(out.exit_code, 0) << out.output;
  EXPECT_EQ(out.signal, 0) << out.output;
  EXPECT_NE(out.output.find(path), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("fix: "), std::string::npos) << out.output;
  for (const char* raw : {"what():", "terminate called", "Exception raised from", "filesystem error"})
    EXPECT_EQ(out.output.find(raw), std::string::npos) << raw << " in\n" << out.output;
}

// An NPY file of `n` zero elements of `descr` (e.g. "<f4", ">u2"), `width` bytes each.
fs::path npy_file(const fs::path& path, const std::string& descr, size_t n, size_t width) {
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += char(header.size() & 0xff);
  bytes += char(header.size() >> 8);
  write_file(path, bytes + header + std::string(n * width, '\0'));
  return path;
}

// Sets an environment variable for one scope (the child inherits it).
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { old_ ? (void)::setenv(name_, old_->c_str(), 1) : (void)::unsetenv(name_); }
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

// A save_folder that is a file, one under a file, an output under a file, a config that is a
// loop of symbolic links: std::filesystem's raw "filesystem error" used to be all the user
// saw (exit 1). Each is now named with a fix, exit 2, and nothing is created or changed.
TEST(UserPaths, FilesWhereFoldersMustBeAndSymlinkLoopsAreNamedTouchingNothing) {
  const auto root = scratch("user_paths");
  const fs::path file = root / "notes.txt";
  write_file(file, "the user's own notes\n");
  const fs::path logs = root / "logs";
  fs::create_directories(logs);
  auto c = tiny(root / "run");
  c.max_duration = "1";
  const auto args = train_args(c);  // writes run.yaml beside run/
  ASSERT_EQ(run_siamese(args, logs / "train.log").exit_code, 0);
  const auto before = entries(root);

  int cases = 0;
  auto refused = [&](const std::vector<std::string>& a, const std::string& named,
                     const std::string& message) {
    SCOPED_TRACE(message);
    const auto out = run_siamese(a, logs / ("case" + std::to_string(cases++) + ".log"));
    expect_clear(out, named);
    EXPECT_EQ(out.exit_code, 2) << out.output;
    EXPECT_NE(out.output.find(message), std::string::npos) << out.output;
  };
  refused(train_args(c, {"--save_folder=" + file.string()}), file.string(),
          "save_folder is a file, not a folder");
  refused(train_args(c, {"--save_folder=" + (file / "run").string()}), (file / "run").string(),
          "save_folder cannot be created: " + file.string() + " is a file, not a folder");
  refused({"report", c.save_folder, "--out", (file / "table.md").string()}, file.string(),
          "is a file, not a folder");
  const fs::path loop_a = root / "loop_a.yaml", loop_b = root / "loop_b.yaml";
  fs::create_symlink(loop_b.filename(), loop_a);
  fs::create_symlink(loop_a.filename(), loop_b);
  for (const char* command : {"train", "config", "inspect"})
    refused({command, loop_a.string()}, loop_a.string(),
            "cannot open the config file: Too many levels of symbolic links");
  EXPECT_EQ(cases, 6);

  EXPECT_EQ(read_all(file), "the user's own notes\n");
  auto after = entries(root);
  after.erase(
      std::remove_if(after.begin(), after.end(), [](const auto& n) { return n.rfind("loop_", 0) == 0; }),
      after.end());
  EXPECT_EQ(after, before);
}

// yaml-cpp leaves `<<` as an ordinary key (it was "unknown key <<"); merges now apply as in
// PyYAML, which OmegaConf reads OLMo's configs with, and a bad merge names its line.
TEST(ConfigFiles, YamlMergeKeysApplyAsInPyYaml) {
  const auto root = scratch("merge_keys");
  const fs::path config = root / "merged.yaml";
  write_file(config,
             "run_name: merged\n"
             "model: &shape\n"
             "  d_model: 48\n"
             "  n_heads: 4\n"
             "evaluators:\n"
             "  - &held_out\n"
             "    label: first\n"
             "    type: lm\n"
             "    subset_num_batches: 3\n"
             "  - <<: *held_out\n"
             "    label: second\n"
             "  - <<: [{label: third, subset_num_batches: 5}, *held_out]\n");
  const auto out = run_siamese({"config", config.string()}, root / "merged.log");
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const config::TrainConfig resolved = config::load_config(config.string(), {}, {}, nullptr);
  EXPECT_EQ(resolved.model.d_model, 48);
  ASSERT_EQ(resolved.evaluators.size(), 3u);
  EXPECT_EQ(resolved.evaluators[1].label, "second");  // its own key wins over the merged one
  EXPECT_EQ(resolved.evaluators[1].type, config::EvaluatorType::Lm);
  EXPECT_EQ(resolved.evaluators[1].subset_num_batches, 3);
  EXPECT_EQ(resolved.evaluators[2].label, "third");  // the first mapping of a list wins
  EXPECT_EQ(resolved.evaluators[2].subset_num_batches, 5);

  // A merged key is checked where the anchor writes it; `<<` of a scalar names its own line.
  write_file(config, "model: &shape\n  d_model: 48\noptimizer:\n  <<: *shape\n");
  auto bad = run_siamese({"config", config.string()}, root / "bad_key.log");
  expect_refused(bad, config.string() + ":2 (optimizer.d_model): unknown key optimizer.d_model");
  write_file(config, "run_name: x\nmodel:\n  <<: 5\n");
  bad = run_siamese({"config", config.string()}, root / "bad_merge.log");
  expect_refused(bad,
                 config.string() + ":3: a merge key `<<` takes a mapping or a list of mappings, got \"5\"");
}

// `SIAMESE_RUNS=` (set, empty) with the quickstart used to save to /quickstart-pre at the
// filesystem root: OmegaConf substitutes "" rather than the default. Refused, naming the
// variable, the file and line, before anything is written.
TEST(ConfigFiles, EmptyEnvironmentVariableWithADefaultIsRefused) {
  const auto root = scratch("empty_env");
  const bool existed = fs::exists("/quickstart-pre");
  const std::string config = std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/quickstart.yaml";
  ScopedEnv empty("SIAMESE_RUNS", "");
  for (const char* command : {"train", "config"}) {
    const auto out = run_siamese({command, config}, root / (std::string(command) + ".log"));
    expect_refused(out, "environment variable SIAMESE_RUNS is set but empty (${oc.env:SIAMESE_RUNS,runs})");
    EXPECT_NE(out.output.find(config + ":"), std::string::npos) << out.output;
    EXPECT_NE(out.output.find("(save_folder)"), std::string::npos) << out.output;
    EXPECT_NE(out.output.find("unset SIAMESE_RUNS"), std::string::npos) << out.output;
  }
  EXPECT_EQ(fs::exists("/quickstart-pre"), existed);
}

// A token file of another dtype used to be told "set data.memmap_dtype to the file's dtype",
// which cannot work for float32, int64 or big-endian files. Another unsigned width is a
// setting; the rest get a numpy command that converts them (and re-tokenizing).
TEST(TokenDataset, NpyFilesOfAnotherDtypeAreRefusedWithAConversionThatWorks) {
  const auto root = scratch("npy_dtypes");
  struct Case {
    std::string descr;
    size_t width;
    std::string message, fix;
  };
  const std::vector<Case> cases = {
      {"<f4", 4, "the file holds float32 ('<f4')", "and (a == a.round()).all(); np.save("},
      {"<i8", 8, "the file holds int64 ('<i8')", "assert a.min() >= 0 and a.max() < 2**16; np.save("},
      {">u2", 2, "the file holds uint16 big-endian ('>u2')", "astype('<u2')"},
      {"<u4", 4, "the file holds uint32 tokens ('<u4'), data.memmap_dtype is uint16",
       "set data.memmap_dtype: uint32"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.descr);
    const std::string name = k.descr.substr(1) + (k.descr[0] == '>' ? "_big" : "");
    const fs::path data = npy_file(root / (name + ".npy"), k.descr, 1000, k.width);
    const auto out =
        run_siamese(train_args(on_files(root / ("run_" + name), {data.string()})), root / (name + ".log"));
    expect_refused(out, data.string() + ": ");
    EXPECT_NE(out.output.find(k.message), std::string::npos) << out.output;
    EXPECT_NE(out.output.find(k.fix), std::string::npos) << out.output;
    if (k.descr != "<u4") {
      EXPECT_NE(out.output.find("np.load('" + data.string() + "')"), std::string::npos) << out.output;
      EXPECT_NE(out.output.find("astype('<u2')"), std::string::npos) << out.output;
      EXPECT_NE(out.output.find("siamese tokenize"), std::string::npos) << out.output;
    }
    EXPECT_FALSE(fs::exists(root / ("run_" + name))) << "nothing is written for a refused run";
  }
}

// Invalid UTF-8 in `eval --text` for a run with a tokenizer gave the tokenizer's own message
// without the file ("Tokenizer::encode: invalid UTF-8 at byte 3"); a folder gave a raw
// basic_filebuf error with exit 1. A byte-level run scores the bytes as its tokens.
TEST(EvalText, InvalidUtf8AndFoldersAreNamedWithLineAndByte) {
  if (!fs::exists(tokenizer_file())) GTEST_SKIP() << "no " << tokenizer_file();
  const auto root = scratch("eval_utf8");
  const fs::path data = token_file(root / "train.npy", 4096);
  auto c = on_files(root / "run", {data.string()});
  c.max_duration = "1";
  ASSERT_EQ(run_siamese(train_args(c), root / "train.log").exit_code, 0);
  const fs::path text = root / "latin1.txt";
  write_file(text, "first line\nsecond caf\xe9 line\n");
  for (const bool per_line : {false, true}) {
    std::vector<std::string> args = {"eval",           c.save_folder, "--tokenizer",
                                     tokenizer_file(), "--text",      text.string()};
    if (per_line) args.push_back("--doc-per-line");
    const auto out = run_siamese(args, root / "utf8.log");
    expect_refused(out, text.string() + ":2: invalid UTF-8 at byte 21 of the file (0xE9)");
    EXPECT_NE(out.output.find("iconv -f latin1 -t utf-8"), std::string::npos) << out.output;
  }
  expect_refused(
      run_siamese({"eval", c.save_folder, "--tokenizer", tokenizer_file(), "--text", root.string()},
                  root / "folder.log"),
      root.string() + ": --text names a folder, not a text file");

  auto bytes = tiny(root / "bytes");  // byte-level: every byte is a token
  bytes.max_duration = "1";
  ASSERT_EQ(run_siamese(train_args(bytes), root / "bytes_train.log").exit_code, 0);
  const auto scored = run_siamese({"eval", bytes.save_folder, "--text", text.string()}, root / "bytes.log");
  EXPECT_EQ(scored.exit_code, 0) << scored.output;
}

// Every subcommand that reads a file, given a bad one (garbage, cut short, a folder, a link
// loop): a non-zero exit, the file's path, a fix, and no raw library text. `info` and
// `commcheck` read no file. Bad option values: ConfigCommand.OptionValuesOutsideTheirRange*.
TEST(EverySubcommand, ABadFileIsNamedWithAFix) {
  if (!fs::exists(tokenizer_file())) GTEST_SKIP() << "no " << tokenizer_file();
  const auto root = scratch("every_subcommand");
  auto c = tiny(root / "run");
  c.max_duration = "1";
  c.save_interval = 1;
  ASSERT_EQ(run_siamese(train_args(c), root / "train.log").exit_code, 0);
  const fs::path run = c.save_folder;

  std::string garbage(3000, '\0');
  std::mt19937 rng(7);
  for (auto& b : garbage) b = char(rng());
  const std::string binary_yaml = write_file(root / "binary.yaml", garbage);
  const std::string cut_yaml = write_file(root / "cut.yaml", "model:\n  d_model: [32, 64\n");
  const fs::path loop = root / "loop.yaml";
  fs::create_symlink("loop2.yaml", loop);
  fs::create_symlink("loop.yaml", root / "loop2.yaml");
  const fs::path folder_yaml = root / "folder.yaml";
  fs::create_directories(folder_yaml);
  const std::string sweep = write_file(root / "sweep.yaml", "base: [\n");
  // A run whose checkpoint files are all cut short.
  const fs::path cut_run = root / "cut_run";
  fs::copy(run, cut_run, fs::copy_options::recursive);
  for (const auto& [step, dir] : train::checkpoint_folders(cut_run))
    for (const auto& f : fs::directory_iterator(dir)) fs::resize_file(f.path(), fs::file_size(f.path()) / 2);
  // A run whose metrics log has a cut line before its last (a cut last line is a kill's,
  // skipped with a warning).
  const fs::path cut_log = root / "cut_log";
  fs::copy(run, cut_log, fs::copy_options::recursive);
  write_file(cut_log / "metrics.jsonl", "{\"step\": 0, \"loss\": \n" + read_all(cut_log / "metrics.jsonl"));
  const std::string bad_tokenizer =
      write_file(root / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab");
  const fs::path hf = root / "hf";
  fs::create_directories(hf);
  write_file(hf / "config.json", "{\"model_type\": \"llama\", \"hidden_");
  const std::string odd_tokens = write_file(root / "odd.npy", std::string(1001, '\1'));
  const fs::path golden = root / "golden";
  fs::create_directories(golden);
  write_file(golden / "config.json", garbage.substr(0, 100));

  struct Case {
    std::vector<std::string> args;
    std::string named;
  };
  const std::vector<Case> cases = {
      {{"train", binary_yaml}, binary_yaml},
      {{"config", cut_yaml}, cut_yaml},
      {{"inspect", loop.string()}, loop.string()},
      {{"bench", folder_yaml.string(), "--steps", "1"}, folder_yaml.string()},
      {{"sweep", sweep}, sweep},
      {{"eval", cut_run.string(), "--tasks", "piqa"}, cut_run.string()},
      {{"generate", cut_run.string(), "--prompt", "1+1="}, cut_run.string()},
      {{"generate", run.string(), "--prompt-file", root.string()}, root.string()},
      {{"export", run.string(), "--out", (root / "export").string(), "--tokenizer", bad_tokenizer},
       bad_tokenizer},
      {{"import", hf.string(), "--out", (root / "imported").string()}, (hf / "config.json").string()},
      {{"analyze", run.string(), "--data", odd_tokens}, odd_tokens},
      {{"detokenize", root.string(), "--tokenizer", tokenizer_file(), "--dtype", "uint16"}, root.string()},
      {{"tokenize", root.string(), "--tokenizer", tokenizer_file(), "-o", (root / "out.npy").string()},
       root.string()},
      {{"report", cut_log.string()}, (cut_log / "metrics.jsonl").string()},
      {{"parity", golden.string()}, golden.string()},
  };
  std::set<std::string> covered;
  for (const auto& k : cases) {
    SCOPED_TRACE(k.args[0]);
    expect_clear(run_siamese(k.args, root / ("bad_" + k.args[0] + ".log")), k.named);
    covered.insert(k.args[0]);
  }
  EXPECT_EQ(covered.size(), 14u);  // generate twice: a cut checkpoint, a folder as its prompt file
  EXPECT_FALSE(fs::exists(root / "export")) << "nothing exported with a tokenizer that does not load";
  EXPECT_FALSE(fs::exists(root / "imported"));
  EXPECT_FALSE(fs::exists(root / "out.npy"));
}

// A second import into the same --out used to replace its step0 without a word. A folder
// that holds anything is now refused naming --overwrite, and one a run or another import
// holds (its lock) is refused naming the holder; --overwrite replaces step0 whole.
TEST(Import, AUsedOutIsRefusedUnlessOverwriteAndALockedOneAlways) {
  const auto root = scratch("import_used_out");
  auto c = tiny(root / "run");
  c.max_duration = "1";
  c.save_interval = 1;
  ASSERT_EQ(run_siamese(train_args(c), root / "train.log").exit_code, 0);
  const fs::path hf = root / "hf", out = root / "imported";
  ASSERT_EQ(run_siamese({"export", c.save_folder, "--out", hf.string()}, root / "export.log").exit_code, 0);
  const Outcome first = run_siamese({"import", hf.string(), "--out", out.string()}, root / "import1.log");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto imported = snapshot(out);
  ASSERT_EQ(imported.count("step0/model.pt"), 1u);

  expect_refused(run_siamese({"import", hf.string(), "--out", out.string()}, root / "import2.log"),
                 "--out is not empty (");
  EXPECT_NE(read_all(root / "import2.log").find("--overwrite"), std::string::npos);
  EXPECT_TRUE(snapshot(out) == imported) << "step0 changed";

  const fs::path notes = root / "notes";
  fs::create_directories(notes);
  std::ofstream(notes / "todo.txt") << "mine\n";
  expect_refused(run_siamese({"import", hf.string(), "--out", notes.string()}, root / "import3.log"),
                 "--out is not empty (todo.txt)");
  EXPECT_EQ(entries(notes), (std::vector<std::string>{"todo.txt"}));

  {
    const train::SaveFolderLock held(out, "a test");
    expect_refused(
        run_siamese({"import", hf.string(), "--out", out.string(), "--overwrite"}, root / "import4.log"),
        "another process (pid " + std::to_string(::getpid()) + ": a test) holds this folder's lock");
    EXPECT_TRUE(snapshot(out) == imported) << "step0 changed";
  }
  const Outcome replaced =
      run_siamese({"import", hf.string(), "--out", out.string(), "--overwrite"}, root / "import5.log");
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_EQ(intact(out), (std::vector<std::string>{"step0"}));
  for (const auto& name : entries(out)) EXPECT_EQ(name.find(".step0."), std::string::npos) << name;
}

// An instance filter that leaves a whole global batch out used to "train" on nothing: loss
// 0, perplexity 1, grad_norm 0, exit 0. The run now stops at that step naming the key. What it
// trained before is saved first, so it resumes with a looser filter.
TEST(InstanceFilter, AStepLeftWithoutInstancesStopsTheRunNamingTheKey) {
  const auto root = scratch("filter_all");
  // 8 instances of 32 tokens, 2 steps per epoch: the instances of step 2 repeat "1 2", the
  // others are random bytes.
  config::TrainConfig c = on_files(root / "run", {(root / "tokens.bin").string()});
  c.data.instance_filter.repetition_max_count = 3;
  c.max_duration = "2";
  const auto second = data::BatchOrder(8, c.global_train_batch_size, uint64_t(c.seed)).rank_batch(1);
  std::vector<uint16_t> ids(8 * 32);
  std::mt19937 rng(1);
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool repeats = std::count(second.begin(), second.end(), int64_t(i / 32)) > 0;
    ids[i] = repeats ? uint16_t(1 + i % 2) : uint16_t(rng() % 256);
  }
  std::ofstream(root / "tokens.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * 2));

  const Outcome stopped = run_siamese(train_args(c), root / "run.log");
  expect_refused(stopped, "step 2: the instance filter left out all 4 instances of the global batch");
  EXPECT_NE(stopped.output.find("data.instance_filter: "), std::string::npos) << stopped.output;
  EXPECT_NE(stopped.output.find("raise data.instance_filter.repetition_max_count (now 3)"),
            std::string::npos);
  EXPECT_NE(stopped.output.find("the run resumes from step1"), std::string::npos) << stopped.output;
  EXPECT_EQ(intact(c.save_folder), (std::vector<std::string>{"step1"}));
  EXPECT_EQ(losses(c.save_folder).size(), 1u);

  // All of it from the first step: nothing trained, nothing saved.
  std::vector<uint16_t> repeats(8 * 32);
  for (size_t i = 0; i < repeats.size(); ++i) repeats[i] = uint16_t(1 + i % 2);
  std::ofstream(root / "repeats.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(repeats.data()), std::streamsize(repeats.size() * 2));
  config::TrainConfig all = on_files(root / "all", {(root / "repeats.bin").string()});
  all.data.instance_filter.repetition_max_count = 3;
  const Outcome none = run_siamese(train_args(all), root / "all.log");
  expect_refused(none, "step 1: the instance filter left out all 4 instances");
  EXPECT_TRUE(intact(all.save_folder).empty());
  EXPECT_TRUE(losses(all.save_folder).empty());
}

// A capacity factor so small that each expert keeps int(factor * tokens * top_k / experts) = 0
// assignments used to train silently with moe_dropped_fraction 1.0 on every step. It is now
// refused before anything is built, naming the key and the smallest factor that keeps one;
// a small capacity that keeps some tokens still trains.
TEST(MoeCapacity, EveryTokenDroppedIsRefusedNamingTheKey) {
  const auto root = scratch("moe_capacity");
  config::TrainConfig c = tiny(root / "run");
  c.max_duration = "1";
  const std::vector<std::string> moe = {"--model.block_type=moe", "--model.moe_num_experts=4",
                                        "--model.moe_dropless=false"};
  auto with = [&](const std::string& factor) {
    auto args = moe;
    args.push_back("--model.moe_capacity_factor=" + factor);
    return train_args(c, args);
  };
  // 2 sequences x 31 input tokens x top 2 = 124 assignments per micro-batch over 4 experts.
  const Outcome refused = run_siamese(with("0.03"), root / "refused.log");
  expect_refused(refused, "each expert may keep int(0.03 x 62 tokens x top 2 / 4 experts) = 0 assignments");
  EXPECT_NE(refused.output.find("model.moe_capacity_factor: "), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("raise model.moe_capacity_factor to at least 0.0323"), std::string::npos)
      << refused.output;
  EXPECT_FALSE(fs::exists(fs::path(c.save_folder) / "metrics.jsonl"));

  const Outcome trains = run_siamese(with("0.0323"), root / "trains.log");
  EXPECT_EQ(trains.exit_code, 0) << trains.output;
  std::ifstream in(fs::path(c.save_folder) / "metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << trains.output;
  const double dropped = nlohmann::json::parse(line).at("moe_dropped_fraction").get<double>();
  EXPECT_GT(dropped, 0.0);
  EXPECT_LT(dropped, 1.0);
}

// A z-loss multiplier that overflows float32 (1e39) made every step's z-loss inf; the run
// stopped saying the loss was non-finite and to lower the learning rate. It now names the
// term and the key, with the multiplier's value.
TEST(NonFinite, AnOverflowingZLossNamesTheTermAndItsMultiplier) {
  const auto root = scratch("zloss_overflow");
  config::TrainConfig c = tiny(root / "run");
  c.max_duration = "2";
  c.softmax_auxiliary_loss = true;
  c.auxiliary_loss_multiplier = 1e39;
  const Outcome out = run_siamese(train_args(c), root / "run.log");
  EXPECT_EQ(out.exit_code, kExitNonFinite) << out.output;
  EXPECT_NE(out.output.find("step 1: non-finite z_loss (z_loss inf, loss "), std::string::npos) << out.output;
  EXPECT_NE(out.output.find("auxiliary_loss_multiplier (1e+39)"), std::string::npos) << out.output;
  // Nothing was saved before step 1, and the message says so (it spoke of a last checkpoint).
  EXPECT_NE(out.output.find("no checkpoint has been saved in"), std::string::npos) << out.output;
  EXPECT_EQ(out.output.find("lower learning rate"), std::string::npos) << out.output;
  EXPECT_NE(read_all(fs::path(c.save_folder) / "metrics.jsonl").find("\"cause\": \"z_loss\""),
            std::string::npos);
  EXPECT_TRUE(intact(c.save_folder).empty());
}

// A stock config.json that lies about its sizes: a size written as a string gave the JSON
// library's type error without the file, and ten million layers the allocator's bad_alloc
// after 15 s. Both are refused from config.json alone, naming the key or the sizes, and the
// --out folder is not created.
TEST(StockImport, AbsurdOrMistypedSizesAreRefusedFromConfigJson) {
  const auto root = scratch("stock_sizes");
  const nlohmann::json llama = {{"model_type", "llama"},        {"hidden_size", 64},
                                {"num_hidden_layers", 2},       {"num_attention_heads", 4},
                                {"intermediate_size", 128},     {"vocab_size", 256},
                                {"max_position_embeddings", 64}};
  auto import_with = [&](const std::string& name, const nlohmann::json& change) {
    nlohmann::json j = llama;
    j.update(change);
    fs::create_directories(root / name);
    write_file(root / name / "config.json", j.dump());
    return run_siamese({"import", (root / name).string(), "--out", (root / name / "run").string()},
                       root / (name + ".log"));
  };
  const Outcome typed = import_with("typed", {{"hidden_size", "32"}});
  expect_refused(typed, "config key hidden_size is \"32\", not a positive integer");
  EXPECT_NE(typed.output.find("config.json"), std::string::npos) << typed.output;
  // Optional keys too: each wrong type is named with its key and the type it needs.
  for (const auto& [key, value, expected] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"num_key_value_heads", "2", "not a positive integer"},
           {"max_position_embeddings", 64.5, "not a positive integer"},
           {"rms_norm_eps", "1e-6", "not a number"},
           {"tie_word_embeddings", "yes", "not true or false"},
           {"hidden_act", 7, "not a string"}}) {
    const Outcome wrong = import_with("typed_" + key, {{key, value}});
    expect_refused(wrong, "config key " + key + " is " + value.dump() + ", " + expected);
    EXPECT_NE(wrong.output.find("config.json"), std::string::npos) << wrong.output;
    EXPECT_FALSE(fs::exists(root / ("typed_" + key) / "run")) << key;
  }
  const Outcome huge = import_with("huge", {{"num_hidden_layers", 10000000}});
  expect_refused(huge, "GiB of float32 weights; this machine has");
  EXPECT_NE(huge.output.find("num_hidden_layers 10000000"), std::string::npos) << huge.output;
  EXPECT_FALSE(fs::exists(root / "huge" / "run"));
}

namespace {

// The tiny run shaped as a stock class computes it: `reordered` (Olmo2ForCausalLM; with
// `windows`, Olmo3ForCausalLM) or, with `moe`, `pre` with OLMoE's blocks (OlmoeForCausalLM).
config::TrainConfig stock_shaped(const fs::path& folder, bool moe, const std::vector<int64_t>& windows = {}) {
  config::TrainConfig c = tiny(folder);
  auto& m = c.model;
  m.residual = moe ? "pre" : "reordered";
  m.use_query_norm = m.use_key_norm = m.use_value_norm = false;
  m.attention_layer_norm = true;
  m.layer_norm_type = config::LayerNormType::RMS;
  m.include_bias = false;
  m.sliding_window_pattern = windows;
  if (moe) {
    m.block_type = config::BlockType::Moe;
    m.moe_num_experts = 4;
    m.moe_top_k = 2;
  }
  c.max_duration = "1";
  c.save_interval = 1;
  return c;
}

// Trains `c` one step and exports it into `hf`; returns its config.json.
nlohmann::json trained_export(const config::TrainConfig& c, const fs::path& hf, const fs::path& logs) {
  const Outcome trained = run_siamese(train_args(c), logs / "train.log");
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
  const Outcome exported = run_siamese({"export", c.save_folder, "--out", hf.string()}, logs / "export.log");
  EXPECT_EQ(exported.exit_code, 0) << exported.output;
  return nlohmann::json::parse(read_all(hf / "config.json"));
}

}  // namespace

// A stock folder's config.json edited after the export (sliding_window 8 -> 4): transformers
// computes with 4, but the import took the run config carried in siamese_run_config (8) and
// said nothing. It now refuses, naming every key that disagrees with both values; the folder
// as exported still imports.
TEST(StockImport, ConfigJsonKeysThatDisagreeWithTheCarriedRunConfigAreRefused) {
  const auto root = scratch("stock_edited");
  const fs::path hf = root / "hf";
  nlohmann::json j = trained_export(stock_shaped(root / "run", false, {8, -1}), hf, root);
  ASSERT_EQ(j["model_type"], "olmo3") << j.dump();
  ASSERT_EQ(j["sliding_window"], 8);
  const Outcome as_exported =
      run_siamese({"import", hf.string(), "--out", (root / "same").string()}, root / "same.log");
  ASSERT_EQ(as_exported.exit_code, 0) << as_exported.output;

  j["sliding_window"] = 4;
  j["rms_norm_eps"] = 1e-3;
  write_file(hf / "config.json", j.dump(2));
  const Outcome edited =
      run_siamese({"import", hf.string(), "--out", (root / "edited").string()}, root / "edited.log");
  expect_refused(edited, "config.json's keys disagree with the run config export carried in it");
  for (const char* said : {"sliding_window 4 (config.json) vs 8 (siamese_run_config)",
                           "rms_norm_eps 0.001 (config.json) vs 1e-05 (siamese_run_config)",
                           "delete the siamese_run_config key"})
    EXPECT_NE(edited.output.find(said), std::string::npos) << said << "\n" << edited.output;
  EXPECT_FALSE(fs::exists(root / "edited"));

  // Without the carried config the folder is a stock one, and config.json's window is taken.
  j.erase("siamese_run_config");
  write_file(hf / "config.json", j.dump(2));
  const Outcome stock =
      run_siamese({"import", hf.string(), "--out", (root / "stock").string()}, root / "stock.log");
  ASSERT_EQ(stock.exit_code, 0) << stock.output;
  const auto imported = config::load_config((root / "stock" / "step0" / "config.yaml").string(), {});
  EXPECT_EQ(imported.model.sliding_window_pattern, (std::vector<int64_t>{4, -1}));
}

// A stock OLMoE folder's messages used to name our tensors and keys: `tensor
// blocks.0.mlp.experts.ff_proj has shape ...` for an edited intermediate_size, `model.moe_top_k 5
// exceeds model.moe_num_experts 4` for num_experts_per_tok 5, `model.layer_norm_eps must be
// positive` for rms_norm_eps -1. Each now names the folder's own tensor or key.
TEST(StockImport, MessagesNameTheFoldersTensorsAndKeys) {
  const auto root = scratch("stock_names");
  const fs::path hf = root / "hf";
  nlohmann::json exported = trained_export(stock_shaped(root / "run", true), hf, root);
  ASSERT_EQ(exported["model_type"], "olmoe") << exported.dump();
  exported.erase("siamese_run_config");  // a folder from the hub, as transformers writes one
  const int64_t inner = exported["intermediate_size"];
  auto import_with = [&](const std::string& name, const nlohmann::json& change) {
    nlohmann::json j = exported;
    j.update(change);
    write_file(hf / "config.json", j.dump(2));
    return run_siamese({"import", hf.string(), "--out", (root / name).string()}, root / (name + ".log"));
  };
  const Outcome shape = import_with("shape", {{"intermediate_size", inner / 2}});
  expect_refused(shape, "tensor model.layers.0.mlp.experts.0.down_proj.weight has shape 32x" +
                            std::to_string(inner) + ", but config.json's sizes give it 32x" +
                            std::to_string(inner / 2));
  const Outcome top_k = import_with("top_k", {{"num_experts_per_tok", 5}});
  expect_refused(top_k, "num_experts_per_tok 5 exceeds num_experts 4");
  const Outcome eps = import_with("eps", {{"rms_norm_eps", -1}});
  expect_refused(eps, "rms_norm_eps must be positive, got -1");
  for (const Outcome* out : {&shape, &top_k, &eps}) {
    EXPECT_EQ(out->output.find("blocks."), std::string::npos) << out->output;
    EXPECT_EQ(out->output.find("model.moe_"), std::string::npos) << out->output;
    EXPECT_EQ(out->output.find("model.layer_norm_eps"), std::string::npos) << out->output;
  }
  for (const char* name : {"shape", "top_k", "eps"}) EXPECT_FALSE(fs::exists(root / name)) << name;

  const Outcome help = run_siamese(std::vector<std::string>{"import", "--help"}, root / "help.log");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("Olmo3ForCausalLM"), std::string::npos) << help.output;
}

// A metrics.jsonl row with "loss": "abc" (a hand edit, a bad merge) made `siamese report` call
// a finished run "diverged at step 3" and hide its losses, without a word. The row is now
// skipped, counted and named by file and line, and the verdict is the good rows'; the figures
// skip it the same way.
TEST(Report, ADamagedRowIsSkippedAndNamedAndTheVerdictIsTheGoodRows) {
  const auto root = scratch("report_damaged");
  const config::TrainConfig c = tiny(root / "run");
  ASSERT_EQ(run_siamese(train_args(c), root / "train.log").exit_code, 0);
  const fs::path metrics = fs::path(c.save_folder) / "metrics.jsonl";
  std::istringstream rows(read_all(metrics));
  std::string text;
  int number = 0, damaged = 0;
  for (std::string line; std::getline(rows, line);) {
    ++number;
    auto row = nlohmann::json::parse(line);
    if (!damaged && row.value("step", 0) == 3 && !row.contains("event") && row.contains("loss")) {
      row["loss"] = "abc";
      line = row.dump();
      damaged = number;
    }
    text += line + "\n";
  }
  ASSERT_GT(damaged, 0) << text;
  write_file(metrics, text);

  const Outcome report =
      run_siamese({"report", c.save_folder, "--out", (root / "report.md").string()}, root / "report.log");
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const std::string named = metrics.string() + ":" + std::to_string(damaged) + " (loss is \"abc\")";
  EXPECT_NE(report.output.find("skipped 1 damaged row"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find(named), std::string::npos) << report.output;
  EXPECT_NE(read_all(root / "report.md").find(named), std::string::npos) << "the notes keep it";
  const auto j = nlohmann::json::parse(read_all(root / "report.json"));
  EXPECT_EQ(j[0]["state"], "finished") << j.dump();
  EXPECT_EQ(j[0]["diverged"], false) << j.dump();
  EXPECT_TRUE(j[0]["final_loss"].is_number()) << j.dump();
  EXPECT_EQ(j[0]["damaged_rows"], 1) << j.dump();

  const Outcome plot =
      run_python(std::string(SIAMESE_SOURCE_DIR) + "/scripts/plot_report.py " +
                     (root / "report.json").string() + " --out " + (root / "fig" / "x").string(),
                 root / "plot.log");
  EXPECT_EQ(plot.exit_code, 0) << plot.output;
  EXPECT_NE(plot.output.find(named), std::string::npos) << plot.output;
  EXPECT_TRUE(fs::exists(root / "fig" / "x_curves.png")) << plot.output;
}

// What a report or its figures cannot use: a --baseline whose every run diverged said "0
// compute budget(s) of the baseline" without why; a sweep folder that had started no run was
// reported as one run named after the folder; scripts/plot_report.py died in a traceback on
// an empty, cut or older report.json. Each now says what is wrong and what to do.
TEST(Report, WhatCannotBeReportedOrDrawnSaysWhy) {
  const auto root = scratch("report_unusable");
  const config::TrainConfig c = tiny(root / "run");
  ASSERT_EQ(run_siamese(train_args(c), root / "train.log").exit_code, 0);
  const Outcome diverged =
      run_siamese({"report", c.save_folder, "--baseline", "hybrid_pre", "--diverge-loss", "0.001"},
                  root / "baseline.log");
  expect_refused(diverged, "of its 1 run, 1 diverged, and those are left out");

  // A sweep killed as soon as it recorded its runs, before the first one made its folder.
  const fs::path sweep = root / "sweep";
  fs::create_directories(sweep);
  const auto [recorded, killed] =
      run_killed_at({"sweep", "--config", std::string(SIAMESE_SOURCE_DIR) + "/configs/tiny/quickstart.yaml",
                     "--topologies", "pre,hybrid_pre", "--lr", "1e-3", "--out", sweep.string()},
                    sweep, IN_MOVED_TO | IN_CLOSE_WRITE, "sweep.json", 1, root / "sweep.log");
  ASSERT_TRUE(killed) << recorded.output;
  ASSERT_TRUE(fs::exists(sweep / "sweep.json")) << recorded.output;
  ASSERT_FALSE(fs::exists(sweep / "pre-lr0.001")) << "the kill came after the first run started";
  const Outcome unstarted = run_siamese({"report", sweep.string()}, root / "unstarted.log");
  expect_refused(unstarted, "the sweep recorded here has started none of its 2 runs");
  EXPECT_FALSE(fs::exists(sweep / "report.md"));

  ASSERT_EQ(
      run_siamese({"report", c.save_folder, "--out", (root / "report.md").string()}, root / "report.log")
          .exit_code,
      0);
  const std::string whole = read_all(root / "report.json");
  auto older = nlohmann::json::parse(whole);
  for (auto& run : older) run.erase("model");
  write_file(root / "empty.json", "");
  write_file(root / "cut.json", whole.substr(0, whole.size() / 2));
  write_file(root / "older.json", older.dump());
  for (const auto& [name, said] : std::vector<std::pair<std::string, std::string>>{
           {"empty", "the file is empty"},
           {"cut", "not whole JSON (cut short?"},
           {"older", "has no model, which an older `siamese report` did not write"}}) {
    const fs::path file = root / (name + ".json");
    const Outcome plot = run_python(std::string(SIAMESE_SOURCE_DIR) + "/scripts/plot_report.py " +
                                        file.string() + " --out " + (root / "fig" / name).string(),
                                    root / (name + ".plot.log"));
    EXPECT_EQ(plot.exit_code, 2) << plot.output;
    EXPECT_NE(plot.output.find("error: " + file.string() + ": "), std::string::npos) << plot.output;
    EXPECT_NE(plot.output.find(said), std::string::npos) << plot.output;
    EXPECT_NE(plot.output.find("fix: write it again"), std::string::npos) << plot.output;
    EXPECT_EQ(plot.output.find("Traceback"), std::string::npos) << plot.output;
  }
}
