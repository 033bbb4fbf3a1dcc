// Sweep expansion and the report's reading of metrics.jsonl (stability markers).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "siamese/common/error.h"
#include "siamese/config/schema.h"
#include "siamese/model/topology_table.h"
#include "siamese/runs/run_summary.h"
#include "siamese/runs/sweep.h"
#include "support/process.h"
#include "support/temp_dir.h"

#include <filesystem>
#include <nlohmann/json.hpp>

using siamese::testing::TempDir;

using namespace siamese::runs;
namespace config = siamese::config;

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
  const std::vector<std::string> expect = {"--model.n_layers=12",
                                           "--model.residual=hybrid_pre",
                                           "--optimizer.learning_rate=0.002",
                                           "--seed=2",
                                           "--run_name=hybrid_pre-lr0.002-s2",
                                           "--save_folder=out/hybrid_pre-lr0.002-s2"};
  EXPECT_EQ(s.runs[7].overrides, expect);
}

// `siamese sweep FILE --seeds 7,8` replaces the file's list; --set settings follow the file's
// overrides, with or without their leading dashes.
TEST(Sweep, ListsGivenOnTheCommandLineReplaceTheFilesAndSettingsFollowItsOverrides) {
  TempDir dir;
  const auto path = dir.write("s.yaml", R"(base: base.yaml
topologies: [pre]
learning_rates: [1.0e-3]
seeds: [1]
overrides: [--model.n_layers=2]
)");
  SweepSpec spec = read_sweep_file(path);
  spec.seeds = {7, 8};
  spec.overrides.push_back(override_from_setting("max_duration=20", "--set"));
  spec.overrides.push_back(override_from_setting("--model.d_model=32", "--set"));
  const auto s = expand_sweep(spec, path);
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_EQ(s.runs[0].name, "pre-lr0.001-s7");
  EXPECT_EQ(s.runs[1].name, "pre-lr0.001-s8");
  const std::vector<std::string> expect = {"--model.n_layers=2",
                                           "--max_duration=20",
                                           "--model.d_model=32",
                                           "--model.residual=pre",
                                           "--optimizer.learning_rate=0.001",
                                           "--seed=8",
                                           "--run_name=pre-lr0.001-s8",
                                           "--save_folder=runs/sweep/pre-lr0.001-s8"};
  EXPECT_EQ(s.runs[1].overrides, expect);
  for (const std::string bad : {"max_duration", "=20", "--"}) {
    try {
      override_from_setting(bad, "--set");
      ADD_FAILURE() << bad;
    } catch (const siamese::Error& e) {
      EXPECT_EQ(e.where(), "--set");
      EXPECT_NE(e.fix().find("dotted.key=value"), std::string::npos) << e.what();
    }
  }
}

// A key the sweep does not know would change nothing silently (`seed:` left the seeds at the
// config's): it is refused with the file and line, and the key it probably meant.
TEST(Sweep, UnknownKeysAreRefusedWithTheFileLineAndTheKeyMeant) {
  TempDir dir;
  const std::pair<std::string, std::string> typos[] = {
      {"seed: [1, 2]", "did you mean \"seeds\"?"},
      {"override: [--max_duration=4]", "did you mean \"overrides\"?"},
      {"learning_rate: [1.0e-3]", "did you mean \"learning_rates\"?"},
      {"lrs: [1.0e-3]", "a sweep file takes only base, base_for, save_root"}};
  for (const auto& [line, fix] : typos) {
    const auto path =
        dir.write("s.yaml", "base: base.yaml\ntopologies: [pre]\nlearning_rates: [1.0e-3]\n" + line + "\n");
    try {
      load_sweep(path);
      ADD_FAILURE() << line;
    } catch (const siamese::Error& e) {
      EXPECT_EQ(e.where(), path + ":4") << e.what();
      EXPECT_NE(e.problem().find("unknown key \"" + line.substr(0, line.find(':')) + "\""), std::string::npos)
          << e.what();
      EXPECT_NE(e.fix().find(fix), std::string::npos) << e.what();
    }
  }
}

TEST(Sweep, TimeLeftComesFromTheRunsFinishedSoFar) {
  EXPECT_EQ(time_left_text(0, 18, 100.0), "time left known after the first run");
  EXPECT_EQ(time_left_text(0, 18, 100.0, 700.0), "about 10m00s left by the measured steps");
  EXPECT_EQ(time_left_text(1, 18, 100.0, 700.0), "about 28m20s left");  // measured runs replace it
  EXPECT_EQ(time_left_text(2, 18, 120.0), "about 16m00s left");         // 60 s a run, 16 to go
  EXPECT_EQ(time_left_text(6, 18, 3600.0), "about 2h00m left");
  EXPECT_EQ(time_left_text(18, 18, 3600.0), "about 0m00s left");
}

// <save_root>/sweep.json keeps the sweep's order (a later sweep's runs after it) and how many
// runs trained at once; the report reads a sweep's folder in that order and marks the speed of
// runs that shared the cores.
TEST(Sweep, TheRecordGivesTheReportTheSweepsOrderAndItsJobs) {
  TempDir dir;
  const std::string root = dir.file("cmp");
  record_sweep(root, {"pre-lr0.002", "pre-lr0.001", "mhc-lr0.001"}, {"pre-lr0.002", "pre-lr0.001"}, 2);
  record_sweep(root, {"pre-lr0.002", "pre-lr0.001", "mhc-lr0.001", "pre-lr0.003"},
               {"pre-lr0.001", "mhc-lr0.001", "pre-lr0.003"}, 1);
  const auto record = read_sweep_record(root);
  ASSERT_TRUE(record);
  const std::vector<std::string> order = {"pre-lr0.002", "pre-lr0.001", "mhc-lr0.001", "pre-lr0.003"};
  EXPECT_EQ(record->runs, order);
  EXPECT_EQ(record->jobs.at("pre-lr0.002"), 2);
  EXPECT_EQ(record->jobs.at("pre-lr0.001"), 2);  // resumed alone: part of it still shared the cores
  EXPECT_EQ(record->jobs.at("mhc-lr0.001"), 1);

  std::string steps;
  for (int s = 1; s <= 4; ++s)
    steps += "{\"step\": " + std::to_string(s) + ", \"loss\": 5.0, \"lr\": 0.001, \"step_seconds\": 0.5}\n";
  for (const std::string name : {"pre-lr0.001", "pre-lr0.002", "mhc-lr0.001", "zz-extra"}) {
    std::filesystem::create_directories(root + "/" + name);
    dir.write("cmp/" + name + "/metrics.jsonl", steps);
  }
  const std::vector<std::string> folders = {root + "/pre-lr0.002", root + "/pre-lr0.001",
                                            root + "/mhc-lr0.001",
                                            root + "/zz-extra"};  // pre-lr0.003 has not started
  EXPECT_EQ(report_folders(root), folders);
  EXPECT_EQ(report_folders(root + "/pre-lr0.001"), std::vector<std::string>{root + "/pre-lr0.001"});

  const auto shared = summarize_run(root + "/pre-lr0.001");
  const auto alone = summarize_run(root + "/mhc-lr0.001");
  EXPECT_EQ(shared.concurrent_runs, 2);
  EXPECT_EQ(alone.concurrent_runs, 1);
  EXPECT_FALSE(summarize_run(root + "/zz-extra").concurrent_runs);
  const std::string table = markdown_table({shared, alone});
  EXPECT_NE(table.find("| - | 4 steps |"), std::string::npos) << table;
  EXPECT_NE(table.find("| 2.00 | 4 steps |"), std::string::npos) << table;
  EXPECT_NE(table.find("steps/s: left out for runs a sweep trained 2 at once"), std::string::npos) << table;
  const auto json = nlohmann::json::parse(runs_json({shared}));
  EXPECT_EQ(json[0]["concurrent_runs"], 2);
  EXPECT_DOUBLE_EQ(json[0]["steps_per_second"].get<double>(), 2.0);
  std::filesystem::remove(root + "/sweep.json");  // a folder of runs a sweep did not record: by name
  EXPECT_EQ(report_folders(root), (std::vector<std::string>{root + "/mhc-lr0.001", root + "/pre-lr0.001",
                                                            root + "/pre-lr0.002", root + "/zz-extra"}));
}

// A variant entry (TOPOLOGY:key=value...) sweeps like a topology: its overrides come after the
// file's and before the sweep's own keys, and its values name the run.
TEST(Sweep, VariantEntriesCarryTheirOverridesAndNameTheRun) {
  TempDir dir;
  const auto path = dir.write("s.yaml", R"(base: base.yaml
base_for: {hybrid_pre: hybrid.yaml}
topologies: [pre, "hybrid_pre:optimizer.name=muon:model.layer_norm_type=dyt"]
learning_rates: [1.0e-3]
overrides: [--model.n_layers=12]
)");
  const auto s = load_sweep(path);
  ASSERT_EQ(s.runs.size(), 2u);
  EXPECT_EQ(s.runs[1].name, "hybrid_pre+muon+dyt-lr0.001");
  EXPECT_EQ(s.runs[1].base, dir.file("hybrid.yaml"));
  const std::vector<std::string> expect = {"--model.n_layers=12",
                                           "--optimizer.name=muon",
                                           "--model.layer_norm_type=dyt",
                                           "--model.residual=hybrid_pre",
                                           "--optimizer.learning_rate=0.001",
                                           "--run_name=hybrid_pre+muon+dyt-lr0.001",
                                           "--save_folder=runs/sweep/hybrid_pre+muon+dyt-lr0.001"};
  EXPECT_EQ(s.runs[1].overrides, expect);
  for (const std::string bad : {"pre:model.layer_norm_type", ":model.n_layers=2", "pre:=dyt"}) {
    const auto broken = dir.write(
        "bad.yaml", "base: base.yaml\nlearning_rates: [1.0e-3]\ntopologies:\n  - \"" + bad + "\"\n");
    try {
      load_sweep(broken);
      ADD_FAILURE() << bad;
    } catch (const siamese::Error& e) {
      EXPECT_NE(std::string(e.what()).find(broken + ":4"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("dotted.key=value"), std::string::npos) << e.what();
    }
  }
}

// A SiameseNorm coupling is a variant like any other: siamese:model.siamese.x_stream=X names
// the run after X, the run's config takes X's placement and the settings X is defined with
// (HybridNorm's Q/K/V norms), and a placement that cannot be X is refused naming the key.
TEST(Sweep, SiameseCouplingVariantsChooseXAndItsSettings) {
  TempDir dir;
  const auto path = dir.write("s.yaml", "base: " + std::string(SIAMESE_SOURCE_DIR) +
                                            "/configs/tiny/base.yaml\nlearning_rates: [1.0e-3]\n"
                                            "topologies: [\"siamese:model.siamese.x_stream=hybrid\"]\n");
  const auto s = load_sweep(path);
  ASSERT_EQ(s.runs.size(), 1u);
  EXPECT_EQ(s.runs[0].name, "siamese+hybrid-lr0.001");
  const auto c = siamese::model::load_run_config(s.runs[0].base, s.runs[0].overrides, {});
  EXPECT_EQ(c.model.residual, "siamese");
  EXPECT_EQ(c.model.siamese.x_stream, config::XStream::Hybrid);
  EXPECT_TRUE(c.model.use_query_norm && c.model.use_key_norm && c.model.use_value_norm);
  try {
    siamese::model::load_run_config(s.runs[0].base,
                                    {"--model.residual=siamese", "--model.siamese.x_stream=hc"}, {});
    ADD_FAILURE() << "x_stream hc accepted";
  } catch (const siamese::Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.siamese.x_stream"), std::string::npos) << e.what();
  }
}

// Every shipped sweep expands into runs whose configs load and validate as `siamese train`
// would load them (world size 8 for the OLMo-1B grid, whose batches are sized for it).
TEST(Sweep, EveryShippedSweepExpandsIntoValidRunConfigs) {
  const std::filesystem::path folder = std::string(SIAMESE_SOURCE_DIR) + "/configs/sweeps";
  int sweeps = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    SCOPED_TRACE(entry.path().string());
    const auto s = load_sweep(entry.path().string());
    ASSERT_FALSE(s.runs.empty());
    for (const auto& run : s.runs) {
      siamese::config::LaunchSettings launch;
      launch.world_size = entry.path().filename().string().rfind("olmo", 0) == 0 ? 8 : 1;
      const auto c = siamese::model::load_run_config(run.base, run.overrides, launch);
      EXPECT_EQ(c.save_folder, run.save_folder);
    }
    ++sweeps;
  }
  EXPECT_GE(sweeps, 6);
}

namespace {

// The siamese::Error that loading `text` as a sweep file throws; fails the test if none.
siamese::Error sweep_error(const TempDir& dir, const std::string& text) {
  const auto path = dir.write("s.yaml", text);
  try {
    load_sweep(path);
  } catch (const siamese::Error& e) {
    return e;
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return siamese::Error("");
}

}  // namespace

// No two runs of a sweep share a folder (issue 60): pre:max_duration=3 and
// pre:scheduler.t_warmup=3 were both pre+3, so the second resumed the first's checkpoint.
// Colliding variants are named by every setting they set; the others keep their short names;
// a value listed twice (the same variant, 1e-3 and 0.001, seed 1 and 1) is refused with its line.
TEST(Sweep, NoTwoRunsShareAFolder) {
  TempDir dir;
  const auto path = dir.write("s.yaml", R"(base: base.yaml
topologies: ["pre:max_duration=3", "pre:scheduler.t_warmup=3", "pre:model.layer_norm_type=dyt"]
learning_rates: [1.0e-3]
)");
  const auto s = load_sweep(path);
  ASSERT_EQ(s.runs.size(), 3u);
  EXPECT_EQ(s.runs[0].name, "pre+max_duration=3-lr0.001");
  EXPECT_EQ(s.runs[1].name, "pre+scheduler.t_warmup=3-lr0.001");
  EXPECT_EQ(s.runs[2].name, "pre+dyt-lr0.001");
  EXPECT_EQ(s.runs[1].save_folder, "runs/sweep/pre+scheduler.t_warmup=3-lr0.001");
  const std::pair<std::string, std::string> repeats[] = {
      {"topologies: [pre, \"pre:model.n_layers=2\", pre]\nlearning_rates: [1.0e-3]\n", "\"pre\" and \"pre\""},
      {"topologies: [\"pre:model.n_layers=2:model.d_model=8\", \"pre:model.d_model=8:model.n_layers=2\"]\n"
       "learning_rates: [1.0e-3]\n",
       "the same settings twice"},
      {"topologies: [pre]\nlearning_rates: [1.0e-3, 2.0e-3, 0.001]\n", "learning rate 0.001 is listed twice"},
      {"topologies: [pre]\nlearning_rates: [1.0e-3]\nseeds: [1, 2, 1]\n", "seed 1 is listed twice"}};
  for (const auto& [lists, problem] : repeats) {
    const auto e = sweep_error(dir, "base: base.yaml\n" + lists);
    EXPECT_NE(e.problem().find(problem), std::string::npos) << e.what();
    EXPECT_NE(e.problem().find("one folder"), std::string::npos) << e.what();
    EXPECT_EQ(e.where().rfind(dir.file("s.yaml") + ":", 0), 0u) << e.what();
  }
}

// {:g} named 0.0012345678 and 0.0012345679 lr0.00123457, one run, and trained it at 0.00123457.
TEST(Sweep, LearningRatesNameAndSetTheRunExactly) {
  TempDir dir;
  SweepSpec spec;
  spec.base = "base.yaml";
  spec.topologies = {config::parse_variant("pre", "test")};
  spec.learning_rates = {0.0012345678, 0.0012345679, 1e-3, 5e-4, 1e-5};
  const auto s = expand_sweep(spec, "the command line");
  ASSERT_EQ(s.runs.size(), 5u);
  const std::vector<std::string> names = {"pre-lr0.0012345678", "pre-lr0.0012345679", "pre-lr0.001",
                                          "pre-lr0.0005", "pre-lr1e-05"};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(s.runs[i].name, names[i]);
    const std::string lr = s.runs[i].overrides[1];
    ASSERT_EQ(lr.rfind("--optimizer.learning_rate=", 0), 0u) << lr;
    EXPECT_EQ(std::stod(lr.substr(lr.find('=') + 1)), spec.learning_rates[i]) << lr;
  }
}

// An override of a key the sweep sets for each run lost to the sweep's value without a word.
// `seed` is the sweep's only when it lists seeds.
TEST(Sweep, OverridesOfTheKeysTheSweepSetsAreRefused) {
  TempDir dir;
  const std::string lists = "base: base.yaml\ntopologies: [pre]\nlearning_rates: [1.0e-3]\n";
  const std::pair<std::string, std::string> cases[] = {
      {"overrides:\n  - --max_duration=4\n  - --optimizer.learning_rate=0.1\n", "--lr"},
      {"overrides: [--model.residual=post]\n", "--topologies"},
      {"overrides: [--save_folder=x]\n", "--out"},
      {"overrides: [--run_name=x]\n", "names each run"},
      {"seeds: [1, 2]\noverrides: [--seed=3]\n", "--seeds"}};
  for (const auto& [more, fix] : cases) {
    const auto e = sweep_error(dir, lists + more);
    EXPECT_NE(e.problem().find("which the sweep sets for each run"), std::string::npos) << e.what();
    EXPECT_NE(e.fix().find(fix), std::string::npos) << e.what();
    EXPECT_EQ(e.where().rfind(dir.file("s.yaml") + ":", 0), 0u) << e.what();
  }
  EXPECT_EQ(sweep_error(dir, lists + "overrides:\n  - --max_duration=4\n  - --optimizer.learning_rate=0.1\n")
                .where(),
            dir.file("s.yaml") + ":6");
  const auto variant = sweep_error(dir,
                                   "base: base.yaml\ntopologies: [\"pre:model.residual=post\"]\n"
                                   "learning_rates: [1.0e-3]\n");
  EXPECT_NE(variant.problem().find("\"pre:model.residual=post\" sets model.residual"), std::string::npos)
      << variant.what();
  EXPECT_EQ(variant.where(), dir.file("s.yaml") + ":2");
  SweepSpec spec = read_sweep_file(dir.write("s.yaml", lists));
  spec.overrides.push_back(override_from_setting("seed=3", "--set"));
  EXPECT_EQ(expand_sweep(spec, "s.yaml").runs.at(0).overrides.at(0), "--seed=3");
}

// `base: [a.yaml, b.yaml]` gave yaml-cpp's "bad conversion" without the file (exit 1).
TEST(Sweep, AListWhereOneFileBelongsIsNamedWithItsLine) {
  TempDir dir;
  const std::string lists = "topologies: [pre]\nlearning_rates: [1.0e-3]\n";
  for (const std::string bad :
       {"base: [a.yaml, b.yaml]\n", "base: {a: b}\n", "base: b.yaml\nsave_root: [x, y]\n",
        "base: b.yaml\nbase_for: {pre: [x.yaml]}\n"}) {
    const auto e = sweep_error(dir, bad + lists);
    EXPECT_NE(e.problem().find("must be one value"), std::string::npos) << e.what();
    EXPECT_EQ(e.where().rfind(dir.file("s.yaml") + ":", 0), 0u) << e.what();
    EXPECT_FALSE(e.fix().empty()) << e.what();
  }
  EXPECT_NE(sweep_error(dir, "base: [a.yaml, b.yaml]\n" + lists).fix().find("base_for"), std::string::npos);
}

// Run names become folders and Slurm job names: a variant value with a slash nested the
// run's folder, one with a newline ended an #SBATCH line.
TEST(Sweep, RunNamesThatCannotBeFolderOrJobNamesAreRefused) {
  TempDir dir;
  for (const std::string bad :
       {"pre:data.paths=[a/b.npy]", "pre:model.layer_norm_type=a b", "pre:model.init_std=0.02\\nx"}) {
    const auto e =
        sweep_error(dir, "base: base.yaml\ntopologies: [\"" + bad + "\"]\nlearning_rates: [1.0e-3]\n");
    EXPECT_NE(e.problem().find("run names become folder names and Slurm job names"), std::string::npos)
        << e.what();
    EXPECT_EQ(e.where(), dir.file("s.yaml") + ":2") << e.what();
  }
}

TEST(Sweep, AMissingKeyIsNamed) {
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
             ", \"loss\": " + (s <= 10 ? "8.0" : "4.0") +
             ", \"lr\": 0.001, \"grad_norm\": 1.0, \"step_seconds\": 0.25" +
             (s == 12 ? ", \"loss_spike\": true" : ", \"loss_spike\": false") + "}\n";
  lines +=
      "{\"step\": 30, \"event\": \"eval\", \"label\": \"valid\", \"loss\": 4.5, \"perplexity\": 90.0, "
      "\"tokens\": 10}\n";
  lines +=
      "{\"step\": 30, \"event\": \"eval\", \"label\": \"sums\", \"loss\": 1.0, \"perplexity\": 2.7, "
      "\"tokens\": 10, \"exact_match\": 0.625}\n";
  lines +=
      "{\"step\": 30, \"eval/downstream/piqa_len_norm\": 0.55, \"eval/downstream/piqa_documents\": 10}\n";
  lines +=
      "{\"step\": 30, \"eval/downstream/arc_easy_acc\": 0.35, \"eval/downstream/arc_easy_documents\": 10}\n";
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
  EXPECT_NE(table.find("| 4.00 | 30 steps*"), std::string::npos) << table;        // 1 / 0.25 s per step
  EXPECT_NE(table.find("| 30 steps* (1 spikes) |"), std::string::npos) << table;  // no plan known
  EXPECT_EQ(state_text(r), "30 steps");
  // run.json records the planned length: a run short of it stopped early.
  dir.write("run.json", "{\"max_steps\": 40, \"git_commit\": \"abc\"}\n");
  EXPECT_EQ(state_text(summarize_run(dir.file(""), {7.0, 20})), "stopped at 30 of 40");
  dir.write("run.json", "{\"max_steps\": 30}\n");
  EXPECT_EQ(state_text(summarize_run(dir.file(""), {7.0, 20})), "finished");
  EXPECT_EQ(markdown_table({summarize_run(dir.file(""))}).find("Measured on"), std::string::npos);
  // The CPU and thread count it ran with follow the table: its digits hold there.
  dir.write("run.json", "{\"max_steps\": 30, \"cpu\": \"AMD EPYC 7B13\", \"intra_op_threads\": 2}\n");
  const auto on_epyc = summarize_run(dir.file(""));
  EXPECT_NE(markdown_table({on_epyc, on_epyc}).find("Measured on: AMD EPYC 7B13, 2 threads (2 runs)."),
            std::string::npos)
      << markdown_table({on_epyc});

  // A final loss above a threshold given, or a non-finite step, marks the run as diverged.
  EXPECT_TRUE(summarize_run(dir.file(""), {3.5, 20}).diverged);
  EXPECT_EQ(state_text(summarize_run(dir.file(""), {3.5, 20})), "diverged (final loss 4.00 > 3.50)");
  std::ofstream(dir.file("metrics.jsonl"), std::ios::app)
      << "{\"step\": 31, \"event\": \"nonfinite\", \"cause\": \"loss\", \"loss\": null, \"grad_norm\": "
         "null}\n";
  auto d = summarize_run(dir.file(""), {7.0, 20});
  EXPECT_TRUE(d.diverged);
  EXPECT_EQ(state_text(d), "diverged at step 31");
  EXPECT_NE(markdown_table({d}).find("diverged at step 31"), std::string::npos);
  EXPECT_EQ(state_text(summarize_run(dir.file(""), {3.5, 20})), "diverged at step 31");

  std::ofstream(dir.file("metrics.jsonl"), std::ios::app) << "{\"step\": 32, \"loss\n";
  try {
    summarize_run(dir.file(""));
    FAIL();
  } catch (const siamese::Error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:36"), std::string::npos) << e.what();
  }
}

// Without --diverge-loss the threshold is the run's own initial loss: a short run of a
// 50k-vocabulary model still at loss 7.5 learned (the fixed 7.0 called it diverged); a run that
// blew up and stayed above where it started did not.
TEST(RunSummary, ARunDivergedWhenItEndsAboveItsInitialLoss) {
  TempDir dir;
  auto write = [&](const std::string& name, double first, double last) {
    std::string lines;
    for (int s = 1; s <= 30; ++s)
      lines += "{\"step\": " + std::to_string(s) + ", \"loss\": " + std::to_string(s == 1 ? first : last) +
               ", \"lr\": 0.001}\n";
    std::filesystem::create_directories(dir.file(name));
    dir.write(name + "/metrics.jsonl", lines);
    return summarize_run(dir.file(name), {std::nullopt, 5});
  };
  const auto learning = write("learning", 10.8, 7.5);
  EXPECT_DOUBLE_EQ(learning.initial_loss, 10.8);
  EXPECT_FALSE(learning.diverged);
  EXPECT_EQ(state_text(learning), "30 steps");
  const auto blew_up = write("blew_up", 10.8, 12.0);
  EXPECT_TRUE(blew_up.diverged);
  EXPECT_EQ(state_text(blew_up), "diverged (final loss 12.00 > 10.80)");
  EXPECT_NE(markdown_table({learning, blew_up}).find("| 7.500 | 1808.04 |"), std::string::npos)
      << markdown_table({learning, blew_up});
  EXPECT_TRUE(summarize_run(dir.file("learning"), {7.0, 5}).diverged);  // an explicit threshold holds
}

// `siamese eval --limit N` scores the first N documents of each task: the report marks those
// numbers, until a full evaluation replaces them.
TEST(RunSummary, LimitedEvaluationsAreMarkedUntilAFullOneReplacesThem) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("run"));
  dir.write(
      "run/metrics.jsonl",
      "{\"step\": 1, \"loss\": 5.0, \"lr\": 0.001}\n"
      "{\"step\": 1, \"eval/downstream/piqa_len_norm\": 0.6, \"eval/downstream/piqa_documents\": 20, "
      "\"limit\": 20}\n"
      "{\"step\": 1, \"eval/downstream/arc_easy_acc\": 0.4, \"eval/downstream/arc_easy_documents\": 2376}\n");
  const auto limited = summarize_run(dir.file("run"));
  EXPECT_EQ(limited.downstream_limit,
            (std::map<std::string, int64_t>{{"eval/downstream/piqa_len_norm", 20}}));
  const std::string table = markdown_table({limited});
  EXPECT_NE(table.find("| 40.0 | 60.0† | 50.0 |"), std::string::npos) << table;  // arc_easy, piqa, Avg
  EXPECT_NE(table.find("†: from `siamese eval --limit 20`"), std::string::npos) << table;
  EXPECT_EQ(
      nlohmann::json::parse(runs_json({limited}))[0]["downstream_limit"]["eval/downstream/piqa_len_norm"],
      20);
  std::ofstream(dir.file("run/metrics.jsonl"), std::ios::app)
      << "{\"step\": 1, \"eval/downstream/piqa_len_norm\": 0.62, \"eval/downstream/piqa_documents\": 1838}\n";
  const auto full = summarize_run(dir.file("run"));
  EXPECT_TRUE(full.downstream_limit.empty());
  EXPECT_EQ(markdown_table({full}).find("†"), std::string::npos) << markdown_table({full});
}

TEST(RunSummary, AFolderWithoutTrainingStepsNeverStartedAndAMissingOneIsAnError) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("empty"));
  EXPECT_EQ(state_text(summarize_run(dir.file("empty"))), "never started");
  dir.write("empty/metrics.jsonl", "");  // a sweep interrupted before its first step
  EXPECT_EQ(state_text(summarize_run(dir.file("empty"))), "never started");
  try {
    summarize_run(dir.file("missing"));
    FAIL();
  } catch (const siamese::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such run folder"), std::string::npos) << e.what();
  }
}

// Three seeds of one topology and learning rate become one row: mean, standard deviation
// (n - 1), the 95% t-interval and n; a diverged seed is counted, not averaged. CSV and JSON carry every run.
TEST(RunSummary, SeedsAggregateAndEveryRunExportsAsCsvAndJson) {
  TempDir dir;
  std::vector<RunSummary> runs;
  const double losses[] = {1.0, 2.0, 3.0};
  for (int seed = 1; seed <= 4; ++seed) {
    RunSummary r;
    r.run = "runs/pre, \"seed\" " + std::to_string(seed);  // quotes and commas survive CSV
    r.topology = r.model = "pre";
    r.learning_rate = 1e-3;
    r.seed = seed;
    r.steps = 100;
    r.max_steps = 100;
    r.diverged = seed == 4;
    r.final_loss = seed == 4 ? 9.0 : losses[seed - 1];
    r.eval_exact_match["sums"] = 0.25 * seed;
    runs.push_back(r);
  }
  const std::string table = markdown_seed_table(runs);
  // Three seeds: mean ± t(0.975, 2) sd / sqrt(3), t = 4.3027 (Stats.StudentTMatchesScipy).
  EXPECT_NE(table.find("| pre | 0.001 | 4 | 1 | 2.000 [-0.484, 4.484] | 50.0 [-12.1, 112.1] |"),
            std::string::npos)
      << table;
  const std::string csv_seeds = seed_csv(runs);
  EXPECT_EQ(
      csv_seeds.substr(0, csv_seeds.find('\n')),
      "model,learning_rate,runs,diverged,final_loss_mean,final_loss_sd,final_loss_ci95_low,final_loss_ci95_"
      "high,final_loss_n,exact_match:sums_mean,exact_match:sums_sd,exact_match:sums_ci95_low,exact_match:"
      "sums_ci95_high,exact_match:sums_n");
  EXPECT_EQ(csv_seeds.substr(csv_seeds.find('\n') + 1, 22), "pre,0.001,4,1,2.0,1.0,") << csv_seeds;
  EXPECT_NE(csv_seeds.find(",4.48413771175"), std::string::npos) << csv_seeds;

  const auto json = nlohmann::json::parse(runs_json(runs));
  ASSERT_EQ(json.size(), 4u);
  EXPECT_EQ(json[0]["run"], runs[0].run);
  EXPECT_EQ(json[0]["state"], "finished");
  EXPECT_DOUBLE_EQ(json[2]["exact_match"]["sums"].get<double>(), 0.75);
  const std::string csv = runs_csv(runs);
  EXPECT_EQ(
      csv.substr(0, csv.find('\n')),
      "run,topology,model,learning_rate,seed,state,steps,max_steps,tokens,initial_loss,final_loss,diverged,"
      "spikes,steps_per_second,concurrent_runs,exact_match:sums");
  EXPECT_NE(csv.find("\"runs/pre, \"\"seed\"\" 1\",pre,pre,0.001,1,finished,100,100,0,,1.0,false,0,,,0.25"),
            std::string::npos)
      << csv;
}

// The report's models: a setting that differs between runs of one topology names them apart
// (its key and non-default value appended, "model." left out); one that differs only across topologies
// (HybridNorm's Q/K/V norms, turned on by the topology) or per run (seed, learning rate) does not.
TEST(RunSummary, SettingsThatTellRunsOfATopologyApartNameTheirModels) {
  struct Made {
    std::string topology, norm, optimizer;
    int64_t seed;
    double lr;
  };
  const Made made[] = {{"pre", "rms", "adamw", 1, 1e-3},        {"pre", "rms", "adamw", 2, 2e-3},
                       {"pre", "dyt", "adamw", 1, 1e-3},        {"pre", "derf", "muon", 1, 1e-3},
                       {"hybrid_pre", "rms", "adamw", 1, 1e-3}, {"hybrid_pre", "rms", "muon", 1, 1e-3}};
  std::vector<RunSummary> runs;
  for (const auto& m : made) {
    siamese::config::TrainConfig c;
    c.model.residual = m.topology;
    c.model.layer_norm_type = *siamese::config::enum_named<siamese::config::LayerNormType>(m.norm);
    c.model.use_query_norm = m.topology == "hybrid_pre";
    c.optimizer.name = *siamese::config::enum_named<siamese::config::OptimizerName>(m.optimizer);
    c.optimizer.learning_rate = m.lr;
    c.seed = m.seed;
    c.save_folder = "runs/" + std::to_string(runs.size());
    RunSummary r;
    r.topology = m.topology;
    for (const auto& field : siamese::config::schema::train_fields())
      r.settings[field.key] = siamese::config::schema::value_text(field, c);
    runs.push_back(r);
  }
  name_models(runs);
  const std::vector<std::string> models = {"pre",
                                           "pre",
                                           "pre layer_norm_type=dyt",
                                           "pre layer_norm_type=derf optimizer.name=muon",
                                           "hybrid_pre",
                                           "hybrid_pre optimizer.name=muon"};
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].model, models[i]) << i;
}

// A run resumed with another learning rate: the summary keeps the first segment's rate and
// lists the change with its step (the config on disk holds only the last segment's), in the
// table and in JSON.
TEST(RunSummary, AResumeWithChangedSettingsShowsEachSegmentsValues) {
  TempDir dir;
  const std::string run = dir.file("run");
  const std::string train =
      "train " + std::string(SIAMESE_SOURCE_DIR) +
      "/configs/tiny/quickstart.yaml --model.n_layers=1 --max_duration=6 --save_interval=3"
      " --eval_interval=1000 --save_folder=" +
      run;
  auto r = siamese::testing::run_siamese(train + " --optimizer.learning_rate=3e-3 --stop-at 3", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = siamese::testing::run_siamese(train + " --optimizer.learning_rate=1e-3", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const RunSummary s = summarize_run(run);
  EXPECT_EQ(s.steps, 6);
  ASSERT_TRUE(s.learning_rate);
  EXPECT_DOUBLE_EQ(*s.learning_rate, 3e-3);
  ASSERT_EQ(s.resumes.size(), 1u);
  EXPECT_EQ(s.resumes[0].step, 3);
  ASSERT_EQ(s.resumes[0].changed.size(), 1u);
  EXPECT_EQ(s.resumes[0].changed[0].key, "optimizer.learning_rate");
  EXPECT_DOUBLE_EQ(std::stod(s.resumes[0].changed[0].now), 1e-3);
  const std::string table = markdown_table({s});
  EXPECT_NE(table.find("optimizer.learning_rate " + s.resumes[0].changed[0].was + " -> " +
                       s.resumes[0].changed[0].now + " from step 3"),
            std::string::npos)
      << table;
  const auto json = nlohmann::json::parse(runs_json({s}));
  EXPECT_EQ(json[0]["resumes"][0]["step"], 3);
}

// decay_branches: after each stable run, one run per branch, from the stable run's checkpoint
// at the branch's step with its decay length, in the folder decay_branch names by default.
TEST(Sweep, DecayBranchesFollowEachStableRunFromItsCheckpoint) {
  TempDir dir;
  const auto path = dir.write("s.yaml", R"(base: base.yaml
save_root: out
topologies: [pre, hybrid_pre]
learning_rates: [1.0e-3]
decay_branches: ["250:50", "500:100"]
)");
  const auto s = load_sweep(path);
  ASSERT_EQ(s.runs.size(), 6u);
  EXPECT_EQ(s.runs[0].name, "pre-lr0.001");
  EXPECT_EQ(s.runs[0].parent, "");
  EXPECT_EQ(s.runs[1].name, "pre-lr0.001_decay250+50");
  EXPECT_EQ(s.runs[1].parent, "pre-lr0.001");
  EXPECT_EQ(s.runs[1].branch_at, 250);
  const std::vector<std::string> expect = {"--model.residual=pre",
                                           "--optimizer.learning_rate=0.001",
                                           "--decay_from=out/pre-lr0.001/step250",
                                           "--scheduler.t_decay=50",
                                           "--run_name=pre-lr0.001_decay250+50",
                                           "--save_folder=out/pre-lr0.001_decay250+50"};
  EXPECT_EQ(s.runs[1].overrides, expect);
  EXPECT_EQ(s.runs[5].name, "hybrid_pre-lr0.001_decay500+100");
  for (const char* bad : {"250-50", "250:", ":50", "0:50", "250:50x"}) {
    try {
      parse_branch(bad, "--decay-branches");
      ADD_FAILURE() << bad;
    } catch (const siamese::Error& e) {
      EXPECT_EQ(e.where(), "--decay-branches") << bad;
    }
  }
  const auto twice = dir.write("t.yaml", R"(base: base.yaml
topologies: [pre]
learning_rates: [1.0e-3]
decay_branches: ["250:50", "250:50"]
)");
  EXPECT_THROW(load_sweep(twice), siamese::Error);
}

// `siamese sweep --decay-branches` trains a stable WSD run and its branches; each branch starts
// from the stable run's weights, optimizer state and data position at its step, so its first
// loss is the stable run's at that step, bit for bit (the learning rates part only after it);
// the report labels the branches by where they start and builds the baseline's ladder from
// them. A stable run that would not keep a branch's checkpoint is refused before any training.
TEST(Sweep, DecayBranchesTrainFromTheStableRunAndFormItsLadder) {
  TempDir dir;
  const std::string common =
      "sweep --config configs/tiny/quickstart.yaml --topologies pre --lr 3e-3 --no-estimate "
      "--set max_duration=40 --set model.d_model=32 --set model.n_layers=2 --set scheduler.name=wsd "
      "--set scheduler.t_decay=8 --set scheduler.t_warmup=5 --set save_interval=10 --set eval_interval=1000 "
      "--set optimizer.metrics_log_interval=1 --set console_log_interval=1 --decay-branches 10:4,20:4 "
      "--out " +
      dir.file("ladder");
  const auto refused = siamese::testing::run_siamese(common, dir.path());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(siamese::testing::read_all(dir.file("cli.stderr")).find("save_num_checkpoints_to_keep"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("ladder/pre-lr0.003")));
  const auto ran =
      siamese::testing::run_siamese(common + " --set save_num_checkpoints_to_keep=-1", dir.path());
  ASSERT_EQ(ran.exit_code, 0) << siamese::testing::read_all(dir.file("cli.stderr"));
  const auto stable = siamese::testing::losses(dir.file("ladder/pre-lr0.003"));
  for (int at : {10, 20}) {
    const auto branch =
        siamese::testing::losses(dir.file("ladder/pre-lr0.003_decay" + std::to_string(at) + "+4"));
    ASSERT_EQ(branch.size(), 4u) << at;
    EXPECT_EQ(branch.begin()->first, at + 1);
    EXPECT_EQ(branch.begin()->second, stable.at(at + 1)) << at;
  }
  const auto report =
      siamese::testing::run_siamese("report " + dir.file("ladder") + " --baseline pre", dir.path());
  ASSERT_EQ(report.exit_code, 0) << siamese::testing::read_all(dir.file("cli.stderr"));
  const std::string out = siamese::testing::read_all(dir.file("cli.stdout"));
  EXPECT_NE(out.find("| pre decay10+4 | 1 |"), std::string::npos) << out;
  EXPECT_NE(out.find("to 3 compute budgets"), std::string::npos) << out;
}
