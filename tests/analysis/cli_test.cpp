// The evaluation workflow through the CLI, as a researcher runs it: `siamese sweep` trains
// tiny runs (one learning rate far too high), `siamese report` tabulates them with the
// stability markers, `siamese eval` scores a checkpoint on downstream tasks and
// `siamese analyze` measures one. The sweep runs once for the whole suite.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "siamese/common/shared_dir.h"

#include "support/process.h"
#include "support/run_files.h"
#include "support/temp_dir.h"

using siamese::testing::run_cli;
using siamese::testing::TempDir;

namespace fs = std::filesystem;
using nlohmann::json;
using siamese::testing::losses;
using siamese::testing::read_all;

namespace {

std::vector<json> metrics_rows(const fs::path& run) {
  std::vector<json> rows;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
  return rows;
}

class CliWorkflow : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    const std::string src = SIAMESE_SOURCE_DIR;
    const std::string sweep = dir_->write("sweep.yaml", "base: " + src + R"(/configs/tiny/base.yaml
base_for: {hybrid_pre: )" + src + R"(/configs/tiny/hybrid.yaml}
save_root: )" + dir_->file("runs") + R"(
topologies: [pre, hybrid_pre]
learning_rates: [3.0e-3, 1.0e+4]
overrides:
  - --model.n_layers=2
  - --model.d_model=16
  - --model.n_heads=2
  - --model.mlp_ratio=2
  - --model.max_sequence_length=32
  - --global_train_batch_size=4
  - --device_train_microbatch_size=4
  - --max_duration=6
  - --scheduler.t_warmup=1
  - --save_interval=6
  - --eval_interval=6
  - --eval_subset_num_batches=1
)");
    sweep_rc_ = run_cli("sweep " + sweep, dir_->file("sweep.log"));
  }
  static void TearDownTestSuite() { delete dir_; }

  static fs::path run(const std::string& name) { return fs::path(dir_->file("runs")) / name; }
  static std::string log(const std::string& name) { return read_all(dir_->file(name)); }

  static TempDir* dir_;
  static int sweep_rc_;
};

TempDir* CliWorkflow::dir_ = nullptr;
int CliWorkflow::sweep_rc_ = -1;

TEST_F(CliWorkflow, SweepTrainsEveryRunAndReportMarksTheDivergedOnes) {
  ASSERT_EQ(sweep_rc_, 0) << log("sweep.log");
  for (const char* name : {"pre-lr0.003", "hybrid_pre-lr0.003", "pre-lr10000", "hybrid_pre-lr10000"})
    ASSERT_TRUE(fs::exists(run(name) / "metrics.jsonl")) << name << "\n" << log("sweep.log");

  const std::string runs = run("pre-lr0.003").string() + " " + run("hybrid_pre-lr0.003").string() + " " +
                           run("pre-lr10000").string() + " " + run("hybrid_pre-lr10000").string();
  ASSERT_EQ(run_cli("report " + runs + " --diverge-loss 50 --final-window 1 --out " + dir_->file("table.md"),
                    dir_->file("report.log")),
            0)
      << log("report.log");
  const std::string table = log("table.md");
  // | Model | LR | seed | steps | tokens | train loss | ... | stability |
  std::map<std::string, std::vector<std::string>> rows;
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cells;
    std::istringstream in(line);
    for (std::string c; std::getline(in, c, '|');) {
      c = std::regex_replace(c, std::regex("^ +| +$"), "");
      cells.push_back(c);
    }
    if (cells.size() > 3 && (cells[1] == "pre" || cells[1] == "hybrid_pre"))
      rows[cells[1] + "-lr" + cells[2]] = cells;
  }
  ASSERT_EQ(rows.size(), 4u) << table;
  for (const char* name : {"pre-lr0.003", "hybrid_pre-lr0.003"}) {
    const auto& r = rows[name];
    EXPECT_EQ(r.back(), "finished") << name << "\n" << table;
    // The final training loss is the last logged step's loss (--final-window 1).
    const auto logged = losses(run(name));
    ASSERT_EQ(logged.size(), 6u) << name;
    EXPECT_NEAR(std::stod(r[6]), std::stod(logged.rbegin()->second), 5e-4) << name << "\n" << table;
  }
  for (const char* name : {"pre-lr10000", "hybrid_pre-lr10000"})
    EXPECT_EQ(rows[name].back().rfind("diverged", 0), 0u) << name << "\n" << table;
}

TEST_F(CliWorkflow, EvalScoresDoNotDependOnBatchSizeAndLandInMetrics) {
  ASSERT_EQ(sweep_rc_, 0) << log("sweep.log");
  const std::string ckpt = run("hybrid_pre-lr0.003").string();
  ASSERT_EQ(run_cli("eval " + ckpt + " --tasks copa,sciq --limit 6 --batch-size 1 --out " +
                        dir_->file("eval1.json"),
                    dir_->file("eval1.log")),
            0)
      << log("eval1.log");
  ASSERT_EQ(run_cli("eval " + ckpt + " --tasks copa,sciq --limit 6 --batch-size 5 --no-metrics --out " +
                        dir_->file("eval5.json"),
                    dir_->file("eval5.log")),
            0)
      << log("eval5.log");
  // Every option read whole instead of continuing its question's cached context.
  ASSERT_EQ(run_cli("eval " + ckpt + " --tasks copa,sciq --limit 6 --no-shared-contexts --no-metrics --out " +
                        dir_->file("eval_whole.json"),
                    dir_->file("eval_whole.log")),
            0)
      << log("eval_whole.log");
  const auto one = json::parse(log("eval1.json")), five = json::parse(log("eval5.json"));
  const auto whole = json::parse(log("eval_whole.json"));
  EXPECT_EQ(one["step"], 6);
  ASSERT_EQ(one["results"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(one["results"][i]["documents"], 6);
    EXPECT_EQ(one["results"][i]["accuracy"], five["results"][i]["accuracy"]);
    EXPECT_EQ(one["results"][i]["accuracy"], whole["results"][i]["accuracy"]);
  }
  // The progress line and the rate of each task.
  EXPECT_NE(log("eval1.log").find("sciq ["), std::string::npos) << log("eval1.log");
  EXPECT_NE(log("eval1.log").find("documents/s)"), std::string::npos) << log("eval1.log");
  // The first call appended its results, under OLMo's names, to the run's metrics.jsonl.
  int appended = 0;
  for (const auto& m : metrics_rows(ckpt))
    if (m.contains("eval/downstream/copa_acc")) {
      ++appended;
      EXPECT_EQ(m["eval/downstream/copa_acc"], one["metrics"]["eval/downstream/copa_acc"]);
    }
  EXPECT_EQ(appended, 1);
}

TEST_F(CliWorkflow, AnalyzeMeasuresEveryStreamOfTheTopology) {
  ASSERT_EQ(sweep_rc_, 0) << log("sweep.log");
  // 400 uint16 tokens of arithmetic text, the configs' memmap_dtype.
  std::string tokens;
  const std::string text = "12+345=357\n";
  for (int i = 0; i < 400; ++i) {
    const uint16_t t = static_cast<unsigned char>(text[i % text.size()]);
    tokens.append(reinterpret_cast<const char*>(&t), 2);
  }
  const std::string data = dir_->write("valid.npy", tokens);
  for (const auto& [name, streams] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"pre-lr0.003", {"x"}}, {"hybrid_pre-lr0.003", {"x", "y"}}}) {
    SCOPED_TRACE(name);
    const std::string out = dir_->file(name + ".analysis.json");
    ASSERT_EQ(run_cli("analyze " + run(name).string() + " --data " + data +
                          " --batches 2 --batch-size 3 --out " + out,
                      dir_->file(name + ".analyze.log")),
              0)
        << log(name + ".analyze.log");
    const auto a = json::parse(log(name + ".analysis.json"));
    EXPECT_EQ(a["n_layers"], 2);
    EXPECT_EQ(a["sequences"], 6);
    ASSERT_EQ(a["magnitude"]["streams"].size(), streams.size());
    for (const auto& s : streams) {
      const auto& m = a["magnitude"]["streams"][s];
      ASSERT_EQ(m.size(), 3u);  // embeddings, after block 0, after block 1
      for (const auto& v : m) EXPECT_GT(v.get<double>(), 0.0);
      const double agree = a["logit_lens"]["agreement"][s];
      EXPECT_GE(agree, 0.0);
      EXPECT_LE(agree, 1.0);
    }
    // Pre-Norm and SiameseNorm mix with fixed weights: no learned mixing over depth to report.
    EXPECT_TRUE(a["depth_mixing"].is_array() && a["depth_mixing"].empty());
    // Effective depth drops k = 0 .. L/2 blocks; k = 0 is the full model.
    ASSERT_EQ(a["effective_depth"].size(), 2u);
    EXPECT_EQ(a["effective_depth"][0]["dropped"], 0);
    EXPECT_NEAR(a["effective_depth"][0]["perplexity"].get<double>(),
                std::exp(a["effective_depth"][0]["loss"].get<double>()),
                1e-9 * a["effective_depth"][0]["perplexity"].get<double>());
  }
}

}  // namespace
