// README's "Compare topologies", through the real binary and plot script at a size that fits
// CI: `siamese sweep` with the grid on the command line, `siamese report` of its folder, and
// scripts/plot_report.py of the report's JSON. Tiny quickstart runs (2 layers, 4 steps).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/temp_dir.h"

using siamese::testing::read_all;
using siamese::testing::run_siamese;
using siamese::testing::TempDir;

namespace fs = std::filesystem;

namespace {

const std::string kTiny =
    " --set model.n_layers=2 --set model.d_model=32 --set model.n_heads=2 --set global_train_batch_size=4"
    " --set device_train_microbatch_size=4 --set max_duration=4 --set scheduler.t_warmup=1"
    " --set eval_interval=2 --set eval_subset_num_batches=1 --set save_interval=1000";

// The lines of `text` that start with `prefix`, in order.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

// `siamese sweep` of tiny quickstart runs with `grid` into `out`; `settings` come after kTiny's.
siamese::testing::Outcome sweep_tiny(const TempDir& dir, const std::string& grid, const std::string& out,
                                     const std::string& settings = "") {
  return run_siamese(
      "sweep --config configs/tiny/quickstart.yaml " + grid + kTiny + settings + " --out " + out, dir.path(),
      "-u WORLD_SIZE -u RANK -u MODEL_TYPE");
}

// scripts/plot_report.py of a report's JSON; its exit status (output in plot.log).
int plot_report(const TempDir& dir, const std::string& report_json, const std::string& figures,
                const std::string& options = "") {
  return siamese::testing::run_python(std::string(SIAMESE_SOURCE_DIR) + "/scripts/plot_report.py " +
                                          report_json + " --out " + figures + options,
                                      dir.file("plot.log"))
      .exit_code;
}

}  // namespace

TEST(Compare, SweepOnTheCommandLineThenReportThenFiguresInThreeCommands) {
  TempDir dir;
  const std::string out = dir.file("cmp");
  auto r = sweep_tiny(dir, "--topologies hybrid_pre,pre --lr 3e-3,1e-2 --seeds 1,2", out);
  ASSERT_EQ(r.exit_code, 0) << r.output << r.err;
  const std::string log = r.output + r.err;
  // Before the first run ends, the time left is the estimate from the measured steps.
  const auto first = log.find("run 1 of 8: hybrid_pre-lr0.003-s1 (about ");
  ASSERT_NE(first, std::string::npos) << log;
  const std::string line = log.substr(first, log.find('\n', first) - first);
  EXPECT_NE(line.find(" left by the measured steps)"), std::string::npos) << line;
  EXPECT_NE(log.find("run 8 of 8: pre-lr0.01-s2 (about "), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(fs::path(out) / "sweep.json"));

  r = run_siamese("report " + out, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output << r.err;
  for (const char* file : {"report.md", "report.csv", "report.json", "report_seeds.csv"})
    EXPECT_TRUE(fs::exists(fs::path(out) / file)) << file;
  // Seed groups first, in the sweep's order (not alphabetical), each over its two seeds.
  const auto groups = lines_starting(read_all(fs::path(out) / "report.md"), "| hybrid_pre | 0.0");
  const auto pre = lines_starting(read_all(fs::path(out) / "report.md"), "| pre | 0.0");
  ASSERT_GE(groups.size(), 2u) << r.output;
  EXPECT_EQ(groups[0].rfind("| hybrid_pre | 0.003 | 2 | 0 |", 0), 0u) << r.output;
  EXPECT_EQ(groups[1].rfind("| hybrid_pre | 0.01 | 2 | 0 |", 0), 0u) << r.output;
  EXPECT_LT(r.output.find("| hybrid_pre | 0.01 |"), r.output.find("| pre | 0.003 |")) << r.output;
  ASSERT_FALSE(pre.empty());
  const auto runs = nlohmann::json::parse(read_all(fs::path(out) / "report.json"));
  ASSERT_EQ(runs.size(), 8u);
  EXPECT_EQ(runs[0]["run"], out + "/hybrid_pre-lr0.003-s1");
  EXPECT_EQ(runs[7]["run"], out + "/pre-lr0.01-s2");
  for (const auto& run : runs) {
    EXPECT_EQ(run["state"], "finished") << run.dump();
    EXPECT_EQ(run["concurrent_runs"], 1) << run.dump();
  }

  ASSERT_EQ(plot_report(dir, out + "/report.json", dir.file("figures/cmp")), 0)
      << read_all(dir.file("plot.log"));
  for (const char* png : {"cmp_curves.png", "cmp_lr.png"})
    EXPECT_GT(fs::file_size(dir.file(std::string("figures/") + png)), 1000u) << png;
  // Against training FLOPs, as vector figures for a paper.
  ASSERT_EQ(plot_report(dir, out + "/report.json", dir.file("figures/flops"), " --x flops --formats pdf,svg"),
            0)
      << read_all(dir.file("plot.log"));
  for (const char* name : {"flops_curves", "flops_lr"}) {
    EXPECT_EQ(read_all(dir.file(std::string("figures/") + name + ".pdf")).rfind("%PDF", 0), 0u) << name;
    EXPECT_NE(read_all(dir.file(std::string("figures/") + name + ".svg")).find("<svg"), std::string::npos)
        << name;
    EXPECT_FALSE(fs::exists(dir.file(std::string("figures/") + name + ".png"))) << name;
  }
  EXPECT_NE(plot_report(dir, out + "/report.json", dir.file("figures/bad"), " --formats jpg"), 0);
  EXPECT_NE(read_all(dir.file("plot.log")).find("--formats jpg: use png, pdf and svg"), std::string::npos)
      << read_all(dir.file("plot.log"));
}

// A setting no config has, or a sweep file's key the sweep does not know, fails before the
// first run trains, naming where and the key.
TEST(Compare, MistakesFailBeforeAnyRunStarts) {
  TempDir dir;
  const auto r = sweep_tiny(dir, "--topologies pre --lr 1e-3", dir.file("cmp"), " --set max_durration=4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("max_durration"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("run pre-lr0.001 of the command line"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir.file("cmp/pre-lr0.001")));

  const std::string file = dir.write("typo.yaml", "base: " + std::string(SIAMESE_SOURCE_DIR) +
                                                      "/configs/tiny/quickstart.yaml\ntopologies: [pre]\n"
                                                      "learning_rates: [1.0e-3]\nseed: [1, 2]\n");
  const auto typo =
      run_siamese("sweep " + file + " --out " + dir.file("cmp"), dir.path(), "-u WORLD_SIZE -u RANK");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find(file + ":4: unknown key \"seed\"\n  fix: did you mean \"seeds\"?"),
            std::string::npos)
      << typo.err;
  EXPECT_FALSE(fs::exists(dir.file("cmp")));
}

// The effective speedup end to end: the baseline at 4, 8 and 16 steps beside another topology
// at 8, `report --baseline`, its JSON and its figure.
TEST(Compare, EffectiveSpeedupFromABaselineLadderInTheReportAndItsFigure) {
  TempDir dir;
  const std::string out = dir.file("speedup");
  auto r = sweep_tiny(
      dir, "--topologies pre:max_duration=4,pre,pre:max_duration=16,hybrid_pre --lr 1e-2 --seeds 1", out,
      " --set max_duration=8");
  ASSERT_EQ(r.exit_code, 0) << r.output << r.err;

  r = run_siamese("report " + out + " --baseline pre", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output << r.err;
  EXPECT_NE(r.output.find("Effective speedup over pre (learning rate 0.01)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pure power law"), std::string::npos) << r.output;  // 3 budgets
  const auto t = nlohmann::json::parse(read_all(fs::path(out) / "report_speedup.json"));
  ASSERT_EQ(t["ladder"].size(), 3u) << t.dump(2);
  EXPECT_EQ(t["ladder"][0]["model"], "pre max_duration=4");
  ASSERT_EQ(t["rows"].size(), 2u) << t.dump(2);
  EXPECT_EQ(t["rows"][0]["model"], "pre");
  EXPECT_DOUBLE_EQ(t["rows"][0]["throughput_ratio"].get<double>(), 1.0);
  const auto& hybrid = t["rows"][1];
  EXPECT_EQ(hybrid["model"], "hybrid_pre");
  // Same shape and tokens as the baseline: the same compute.
  EXPECT_DOUBLE_EQ(hybrid["compute"].get<double>(), t["rows"][0]["compute"].get<double>());
  // Trained alone on this host with this thread count: its tokens/s compares (E = 0: a multiplier).
  ASSERT_FALSE(hybrid["speedup"].is_null()) << hybrid.dump();
  EXPECT_NEAR(hybrid["speedup"].get<double>(),
              hybrid["multiplier"].get<double>() * hybrid["throughput_ratio"].get<double>(), 1e-12);

  ASSERT_EQ(plot_report(dir, out + "/report.json", dir.file("figures/speedup")), 0)
      << read_all(dir.file("plot.log"));
  EXPECT_GT(fs::file_size(dir.file("figures/speedup_speedup.png")), 1000u);

  r = run_siamese("report " + out + " --baseline post", dir.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--baseline: no run of the baseline model \"post\""), std::string::npos) << r.err;
}
