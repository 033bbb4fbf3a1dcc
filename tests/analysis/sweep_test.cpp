// Sweep expansion and the report's reading of metrics.jsonl (stability markers).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../tokenizer/temp_dir.h"
#include "siamese/analysis/run_summary.h"
#include "siamese/analysis/sweep.h"
#include "siamese/common/error.h"

using namespace siamese::analysis;

TEST(Sweep, ExpandsTopologyTimesLrTimesSeed) {
  TempDir dir;
  const auto path = dir.write("s.yaml", R"(base: base.yaml
base_for: {hybrid_pre: hybrid.yaml}
save_root: out
topologies: [pre, hybrid_pre]
learning_rates: [1.0e-3, 2.0e-3]
seeds: [1, 2]
overrides: [--model.n_layers=12]
)");
  const auto s = load_sweep(path);
  ASSERT_EQ(s.runs.size(), 8u);
  EXPECT_EQ(s.runs[0].name, "pre-lr0.001-s1");
  EXPECT_EQ(s.runs[0].base, dir.file("base.yaml"));
  EXPECT_EQ(s.runs[7].name, "hybrid_pre-lr0.002-s2");
  EXPECT_EQ(s.runs[7].base, dir.file("hybrid.yaml"));
  const std::vector<std::string> expect = {"--model.n_layers=12", "--model.residual=hybrid_pre",
                                           "--optimizer.learning_rate=0.002", "--seed=2",
                                           "--run_name=hybrid_pre-lr0.002-s2",
                                           "--save_folder=out/hybrid_pre-lr0.002-s2"};
  EXPECT_EQ(s.runs[7].overrides, expect);
}

TEST(Sweep, SeedsGivenOnTheCommandLineReplaceTheFilesList) {
  TempDir dir;
  const auto path = dir.write("s.yaml", R"(base: base.yaml
topologies: [pre]
learning_rates: [1.0e-3]
seeds: [1]
)");
  const auto s = load_sweep(path, {7, 8});
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_EQ(s.runs[0].name, "pre-lr0.001-s7");
  EXPECT_EQ(s.runs[1].name, "pre-lr0.001-s8");
  EXPECT_EQ(s.runs[1].overrides[2], "--seed=8");
}

TEST(Sweep, MissingKeyIsNamed) {
  TempDir dir;
  const auto path = dir.write("s.yaml", "base: b.yaml\ntopologies: [pre]\n");
  try {
    load_sweep(path);
    FAIL();
  } catch (const siamese::Error& e) {
    EXPECT_NE(std::string(e.what()).find("learning_rates"), std::string::npos) << e.what();
  }
}

TEST(RunSummary, StabilityMarkersAndMetrics) {
  TempDir dir;
  std::string lines;
  for (int s = 1; s <= 30; ++s)
    lines += "{\"step\": " + std::to_string(s) + ", \"tokens\": " + std::to_string(100 * s) +
             ", \"loss\": " + (s <= 10 ? "8.0" : "4.0") + ", \"lr\": 0.001, \"grad_norm\": 1.0, \"step_seconds\": 0.25" +
             (s == 12 ? ", \"loss_spike\": true" : ", \"loss_spike\": false") + "}\n";
  lines += "{\"step\": 30, \"event\": \"eval\", \"label\": \"valid\", \"loss\": 4.5, \"perplexity\": 90.0, \"tokens\": 10}\n";
  lines += "{\"step\": 30, \"event\": \"eval\", \"label\": \"sums\", \"loss\": 1.0, \"perplexity\": 2.7, \"tokens\": 10, \"exact_match\": 0.625}\n";
  lines += "{\"step\": 30, \"eval/downstream/piqa_len_norm\": 0.55, \"eval/downstream/piqa_documents\": 10}\n";
  lines += "{\"step\": 30, \"eval/downstream/arc_easy_acc\": 0.35, \"eval/downstream/arc_easy_documents\": 10}\n";
  dir.write("metrics.jsonl", lines);
  auto r = summarize_run(dir.file(""), {7.0, 20});
  EXPECT_EQ(r.steps, 30);
  EXPECT_EQ(r.tokens, 3000);
  EXPECT_DOUBLE_EQ(r.final_loss, 4.0);
  EXPECT_EQ(r.spikes, 1);
  EXPECT_FALSE(r.diverged);
  EXPECT_DOUBLE_EQ(r.eval_perplexity.at("valid"), 90.0);
  EXPECT_EQ(r.downstream.size(), 2u);
  auto table = markdown_table({r});
  EXPECT_NE(table.find("| 90.00 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| 45.0 |"), std::string::npos) << table;  // average of 55.0 and 35.0
  EXPECT_NE(table.find("| sums exact % |"), std::string::npos) << table;
  EXPECT_NE(table.find("| 62.5 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| 4.00 | ok*"), std::string::npos) << table;  // 1 / 0.25 s per step
  EXPECT_NE(table.find("ok* (1 spikes)"), std::string::npos) << table;

  // A final loss above the threshold, or a non-finite step, marks the run as diverged.
  EXPECT_TRUE(summarize_run(dir.file(""), {3.5, 20}).diverged);
  std::ofstream(dir.file("metrics.jsonl"), std::ios::app)
      << "{\"step\": 31, \"event\": \"nonfinite\", \"cause\": \"loss\", \"loss\": null, \"grad_norm\": null}\n";
  auto d = summarize_run(dir.file(""), {7.0, 20});
  EXPECT_TRUE(d.diverged);
  EXPECT_NE(markdown_table({d}).find("diverged"), std::string::npos);

  std::ofstream(dir.file("metrics.jsonl"), std::ios::app) << "{\"step\": 32, \"loss\n";
  try {
    summarize_run(dir.file(""));
    FAIL();
  } catch (const siamese::Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:36"), std::string::npos) << e.what();
  }
}
