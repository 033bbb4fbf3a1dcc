// `siamese generate` and `siamese eval --text` on a run trained through the CLI: a tiny
// byte-level model on the built-in arithmetic corpus (trained once for the suite).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "support/cli.h"
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
  EXPECT_LT(double(per_file["perplexity"]), 256.0);                            // learned something about sums
  EXPECT_NE(read_all(file("t1.err")).find("documents/s"), std::string::npos);  // the progress bar

  ASSERT_EQ(
      run_cli("eval " + run() + " --text " + path + " --doc-per-line --out " + file("t2.json"), file("t2")),
      0)
      << read_all(file("t2.err"));
  const auto per_line = nlohmann::json::parse(read_all(file("t2.json")));
  EXPECT_EQ(per_line["documents"], 30);
  // The same lines scored by transformers on the exported model (each fits one window).
  ASSERT_EQ(run_cli("export " + run() + " --out " + file("hf"), file("x")), 0) << read_all(file("x.err"));
  const std::string py = std::string(SIAMESE_PYTHON) + " " + SIAMESE_SOURCE_DIR +
                         "/tests/eval/hf_text_loss.py " + file("hf") + " " + path + " 10 > " +
                         file("hf_loss") + " 2> " + file("hf_loss.err");
  ASSERT_EQ(std::system(py.c_str()), 0) << read_all(file("hf_loss.err"));
  EXPECT_NEAR(double(per_line["loss"]), std::stod(read_all(file("hf_loss"))), 1e-5)
      << "siamese " << per_line["loss"] << " transformers " << read_all(file("hf_loss"));
  ASSERT_NE(run_cli("eval " + run() + " --text " + file("missing.txt"), file("t3")), 0);
  EXPECT_NE(read_all(file("t3.err")).find("fix:"), std::string::npos);
}

}  // namespace
