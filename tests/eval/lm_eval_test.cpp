// An exported model under the lm-eval harness (PyPI lm-eval, `--model hf`) with the task
// YAMLs the project ships (configs/lm_eval): the accuracies it reports equal `siamese eval`'s
// on the same documents, both metrics (acc = acc; lm-eval's acc_norm = OLMo's len_norm, the
// log-likelihood per character of the answer).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "siamese/common/shared_dir.h"
#include "support/process.h"
#include "support/temp_dir.h"

using siamese::testing::read_all;
using siamese::testing::run_python;
using siamese::testing::TempDir;

namespace fs = std::filesystem;

namespace {

nlohmann::json lm_eval_results(const fs::path& output_path) {
  for (const auto& e : fs::recursive_directory_iterator(output_path))
    if (e.path().filename().string().rfind("results_", 0) == 0)
      return nlohmann::json::parse(read_all(e.path()));
  return {};
}

double siamese_accuracy(const std::string& json_path, const std::string& task) {
  const auto doc = nlohmann::json::parse(read_all(json_path));
  for (const auto& r : doc["results"])
    if (r["task"] == task) return r["accuracy"];
  ADD_FAILURE() << task << " missing from " << json_path;
  return -1;
}

TEST(LmEval, TheHarnessScoresAnExportLikeSiameseEval) {
  const std::string python = SIAMESE_PYTHON;
  TempDir dir;
  if (run_python("-c 'import lm_eval'", dir.file("import.log")).exit_code != 0)
    GTEST_SKIP() << "lm-eval is not installed for " << python << " (scripts/requirements.txt)";
  const std::string tokenizer = siamese::shared_dir() + "/tokenizers/olmo-gpt-neox-20b-pii-special.json";
  // A few steps of a GPT-NeoX-vocabulary SiameseNorm model (its export ships
  // modeling_siamese.py): enough that answers' likelihoods differ. 512 positions hold every
  // document whole, so neither side truncates.
  const std::string src = SIAMESE_SOURCE_DIR;
  ASSERT_EQ(siamese::testing::run_cli(
                "train " + src +
                    "/configs/tiny/quickstart.yaml --model.residual=hybrid_pre --model.n_layers=2 "
                    "--model.max_sequence_length=512 " +
                    "--model.vocab_size=50280 --model.embedding_size=50304 --max_duration=2 " +
                    "--global_train_batch_size=2 --device_train_microbatch_size=2 --evaluators=[] " +
                    "--save_folder=" + dir.file("run"),
                dir.file("train.log")),
            0)
      << read_all(dir.file("train.log"));
  ASSERT_EQ(siamese::testing::run_cli(
                "export " + dir.file("run") + " --out " + dir.file("hf") + " --tokenizer " + tokenizer,
                dir.file("export.log")),
            0)
      << read_all(dir.file("export.log"));

  const int limit = 60;
  for (const std::string metric : {"acc", "len_norm"})
    ASSERT_EQ(siamese::testing::run_cli(
                  fmt::format("eval {} --tokenizer {} --tasks piqa,arc_easy --limit {} "
                              "--metric {} --no-metrics --out {}",
                              dir.file("run"), tokenizer, limit, metric, dir.file(metric + ".json")),
                  dir.file(metric + ".log")),
              0)
        << read_all(dir.file(metric + ".log"));

  // The shipped YAMLs name ../shared/evals relative to the repository root; the shared
  // folder this build uses may live elsewhere, so the test's copies name it.
  fs::create_directories(dir.file("tasks"));
  for (const std::string task : {"siamese_piqa", "siamese_arc_easy"}) {
    std::string yaml = read_all(src + "/configs/lm_eval/" + task + ".yaml");
    // Every occurrence: the header comment names the folder before the data_files line does.
    ASSERT_NE(yaml.find("../shared/"), std::string::npos) << task;
    const std::string shared = siamese::shared_dir();
    for (auto at = yaml.find("../shared/"); at != std::string::npos;
         at = yaml.find("../shared/", at + shared.size()))
      yaml.replace(at, std::string("../shared").size(), shared);
    std::ofstream(dir.file("tasks/" + task + ".yaml")) << yaml;
  }
  siamese::testing::Limits offline;
  offline.cwd = src;
  offline.env = {{"HF_HUB_OFFLINE", "1"}, {"HF_DATASETS_OFFLINE", "1"}};
  const std::string lm_eval = fmt::format(
      "-m lm_eval --model hf "
      "--model_args pretrained={},dtype=float32,trust_remote_code=True --tasks siamese_piqa,siamese_arc_easy "
      "--include_path {} "
      "--limit {} --batch_size 8 --device cpu --output_path {}",
      dir.file("hf"), dir.file("tasks"), limit, dir.file("lm_eval_out"));
  ASSERT_EQ(run_python(lm_eval, dir.file("lm_eval.log"), offline).exit_code, 0)
      << read_all(dir.file("lm_eval.log"));
  const auto results = lm_eval_results(dir.file("lm_eval_out"))["results"];
  ASSERT_TRUE(results.is_object()) << read_all(dir.file("lm_eval.log"));

  for (const std::string task : {"piqa", "arc_easy"}) {
    const auto& r = results["siamese_" + task];
    EXPECT_DOUBLE_EQ(double(r["acc,none"]), siamese_accuracy(dir.file("acc.json"), task)) << task;
    EXPECT_DOUBLE_EQ(double(r["acc_norm,none"]), siamese_accuracy(dir.file("len_norm.json"), task)) << task;
  }
}

}  // namespace
