// `siamese generate` and `siamese eval --text` on a run trained through the CLI: a tiny
// byte-level model on the built-in arithmetic corpus (trained once for the suite).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "support/process.h"
#include "support/temp_dir.h"

using siamese::testing::read_all;
using siamese::testing::TempDir;

namespace fs = std::filesystem;

namespace {
// stdout to `out`, stderr to `out`.err.
int run_cli(const std::string& args, const std::string& out) {
  return siamese::testing::run_cli(args, out, out + ".err");
}

class GenerateAndScore : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    const std::string src = SIAMESE_SOURCE_DIR;
    train_rc_ = run_cli("train " + src + "/configs/tiny/quickstart.yaml --model.n_layers=2 " +
                            "--model.max_sequence_length=96 --max_duration=30 --save_interval=30 " +
                            "--eval_interval=1000 --save_folder=" + dir_->file("run"),
                        dir_->file("train.log"));
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string run() { return dir_->file("run"); }
  static std::string file(const std::string& name) { return dir_->file(name); }

  static TempDir* dir_;
  static int train_rc_;
};

TempDir* GenerateAndScore::dir_ = nullptr;
int GenerateAndScore::train_rc_ = -1;

TEST_F(GenerateAndScore, GeneratesFromPromptsAndAPromptFile) {
  ASSERT_EQ(train_rc_, 0) << read_all(file("train.log.err"));
  ASSERT_EQ(run_cli("generate " + run() + " --prompt 12+34= --max-tokens 8", file("g1")), 0)
      << read_all(file("g1.err"));
  const auto one = read_all(file("g1"));
  EXPECT_EQ(one.rfind("12+34=", 0), 0u) << one;
  // EOS of this model is '\n': generation ends there, one line per prompt.
  EXPECT_EQ(std::count(one.begin(), one.end(), '\n'), 1) << one;

  const auto prompts = dir_->write("prompts.txt", "1+1=\n\n25+5=\n");
  ASSERT_EQ(run_cli("generate " + run() + " --prompt-file " + prompts +
                        " --temperature 0.8 --top-k 5 --top-p 0.9 --seed 3 --max-tokens 6",
                    file("g2")),
            0)
      << read_all(file("g2.err"));
  const auto two = read_all(file("g2"));
  EXPECT_EQ(two.rfind("1+1=", 0), 0u) << two;
  EXPECT_NE(two.find("\n25+5="), std::string::npos) << two;
  ASSERT_EQ(run_cli("generate " + run() + " --prompt-file " + prompts +
                        " --temperature 0.8 --top-k 5 --top-p 0.9 --seed 3 --max-tokens 6",
                    file("g3")),
            0);
  EXPECT_EQ(read_all(file("g3")), two);  // same seed, same text
}

// The model reads 96 positions. Without --max-tokens, a 90-token prompt gets what the context
// leaves (the README's command on the quickstart model failed before); an explicit
// --max-tokens past the context is refused before anything is printed.
TEST_F(GenerateAndScore, TheDefaultLengthFitsTheContextAndTooMuchIsRefusedCleanly) {
  ASSERT_EQ(train_rc_, 0) << read_all(file("train.log.err"));
  std::string prompt;
  while (prompt.size() < 90) prompt += "12+34=46 ";
  prompt.resize(90);
  const auto prompts = dir_->write("long.txt", prompt + "\n");
  ASSERT_EQ(run_cli("generate " + run() + " --prompt-file " + prompts + " --eos 1000", file("d")), 0)
      << read_all(file("d.err"));
  EXPECT_EQ(read_all(file("d")).size(), 96u + 1) << read_all(file("d"));  // 90 + 6 bytes, then "\n"

  EXPECT_NE(run_cli("generate " + run() + " --prompt-file " + prompts + " --max-tokens 7", file("e")), 0);
  EXPECT_EQ(read_all(file("e")), "");
  EXPECT_NE(read_all(file("e.err")).find("exceed the model's max_sequence_length 96"), std::string::npos)
      << read_all(file("e.err"));
}

TEST_F(GenerateAndScore, BenchReportsTokensPerSecondWithAndWithoutTheCache) {
  ASSERT_EQ(train_rc_, 0) << read_all(file("train.log.err"));
  ASSERT_EQ(run_cli("generate " + run() + " --prompt 1+2=3 --bench --max-tokens 16", file("b")), 0)
      << read_all(file("b")) << read_all(file("b.err"));
  const auto out = read_all(file("b"));
  EXPECT_NE(out.find("tokens/s with KV cache:"), std::string::npos) << out;
  EXPECT_NE(out.find("tokens/s without KV cache:"), std::string::npos) << out;
  EXPECT_NE(out.find("same tokens: yes"), std::string::npos) << out;
}

TEST_F(GenerateAndScore, ScoresTextFilesPerFileAndPerLine) {
  ASSERT_EQ(train_rc_, 0) << read_all(file("train.log.err"));
  std::string text;
  for (int a = 10; a < 40; ++a)
    text +=
        std::to_string(a) + "+" + std::to_string(a * 3 % 97) + "=" + std::to_string(a + a * 3 % 97) + "\n";
  const auto path = dir_->write("sums.txt", text);
  ASSERT_EQ(
      run_cli("eval " + run() + " --text " + path + " --stride 32 --out " + file("t1.json"), file("t1")), 0)
      << read_all(file("t1.err"));
  const auto per_file = nlohmann::json::parse(read_all(file("t1.json")));
  EXPECT_EQ(per_file["documents"], 1);
  // Byte-level: a token is a byte, and the model's EOS ('\n') starts the document.
  EXPECT_EQ(per_file["bytes"], int64_t(text.size()));
  EXPECT_EQ(per_file["tokens"], int64_t(text.size()));
  const double bpb = per_file["bits_per_byte"];
  EXPECT_NEAR(bpb, double(per_file["loss"]) / std::log(2.0), 1e-9);
  EXPECT_LT(double(per_file["perplexity"]), 256.0);  // learned something about sums
  // The progress bar, in scored tokens.
  EXPECT_NE(read_all(file("t1.err")).find(fmt::format("{0}/{0} tokens", text.size())), std::string::npos)
      << read_all(file("t1.err"));

  ASSERT_EQ(
      run_cli("eval " + run() + " --text " + path + " --doc-per-line --out " + file("t2.json"), file("t2")),
      0)
      << read_all(file("t2.err"));
  const auto per_line = nlohmann::json::parse(read_all(file("t2.json")));
  EXPECT_EQ(per_line["documents"], 30);
  // The same lines scored by transformers on the exported model (each fits one window).
  ASSERT_EQ(run_cli("export " + run() + " --out " + file("hf"), file("x")), 0) << read_all(file("x.err"));
  siamese::testing::Limits to_files;
  to_files.err = file("hf_loss.err");
  const auto hf = siamese::testing::run_python(
      std::string(SIAMESE_SOURCE_DIR) + "/tests/eval/hf_text_loss.py " + file("hf") + " " + path + " 10",
      file("hf_loss"), to_files);
  ASSERT_EQ(hf.exit_code, 0) << hf.err;
  EXPECT_NEAR(double(per_line["loss"]), std::stod(read_all(file("hf_loss"))), 1e-5)
      << "siamese " << per_line["loss"] << " transformers " << read_all(file("hf_loss"));
  ASSERT_NE(run_cli("eval " + run() + " --text " + file("missing.txt"), file("t3")), 0);
  EXPECT_NE(read_all(file("t3.err")).find("fix:"), std::string::npos);
}

}  // namespace

// A run started with a tokenizer path relative to its working folder works from any other
// folder, even once that path is gone: the run folder keeps a copy (siamese_tokenizer.json),
// which generate, eval and export fall back to.
TEST(SelfContainedRun, GenerateEvalAndExportWorkFromElsewhereAfterTheTokenizerMoves) {
  TempDir dir;
  fs::create_directories(dir.file("work/tok"));
  fs::copy_file(siamese::testing::tokenizer_path("olmo-gpt-neox-20b-pii-special"),
                dir.file("work/tok/t.json"));
  std::string text;
  for (int i = 0; i < 200; ++i) text += "The cat sat on the mat number " + std::to_string(i) + ".\n";
  dir.write("work/corpus.txt", text);
  const auto in_work = [&](const std::string& args) {
    return siamese::testing::run_siamese(args, dir.path(), "", dir.file("work"));
  };
  auto r = in_work("tokenize --tokenizer tok/t.json corpus.txt -o data/corpus.npy");
  ASSERT_EQ(r.exit_code, 0) << r.output << r.err;
  r = in_work("train " + std::string(SIAMESE_SOURCE_DIR) +
              "/configs/tiny/base.yaml --tokenizer.identifier=tok/t.json --data.paths=[data/corpus.npy]"
              " --model.d_model=16 --model.n_heads=2 --model.n_layers=1 --model.max_sequence_length=32"
              " --global_train_batch_size=2 --device_train_microbatch_size=2 --max_duration=2"
              " --save_interval=2 --eval_interval=1000 --evaluators=[] --save_folder=run");
  ASSERT_EQ(r.exit_code, 0) << r.output << r.err;
  EXPECT_TRUE(fs::exists(dir.file("work/run/siamese_tokenizer.json")));
  fs::remove_all(dir.file("work/tok"));

  const std::string run = dir.file("work/run");
  r = siamese::testing::run_siamese("generate " + run + " --prompt 'The cat' --max-tokens 3", dir.path(), "",
                                    "/");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.output.rfind("The cat", 0), 0u) << r.output;
  const auto doc = dir.write("doc.txt", "The cat sat on the mat.\n");
  r = siamese::testing::run_siamese("eval " + run + " --text " + doc, dir.path(), "", "/");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = siamese::testing::run_siamese("export " + run + " --out " + dir.file("hf"), dir.path(), "", "/");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_all(dir.file("hf/tokenizer.json")), read_all(dir.file("work/run/siamese_tokenizer.json")));

  // Without the copy the message names the config key and the fix.
  fs::remove(dir.file("work/run/siamese_tokenizer.json"));
  r = siamese::testing::run_siamese("generate " + run + " --prompt x", dir.path(), "", "/");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tokenizer.identifier"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--tokenizer"), std::string::npos) << r.err;
}
