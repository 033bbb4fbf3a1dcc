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

}  // namespace

TEST(Compare, SweepOnTheCommandLineThenReportThenFiguresInThreeCommands) {
  TempDir dir;
  const std::string out = dir.file("cmp");
  auto r = run_siamese(
      "sweep --config configs/tiny/quickstart.yaml --topologies hybrid_pre,pre --lr 3e-3,1e-2"
      " --seeds 1,2" +
          kTiny + " --out " + out,
      dir.path(), "-u WORLD_SIZE -u RANK -u MODEL_TYPE");
  ASSERT_EQ(r.exit_code, 0) << r.output << r.err;
  const std::string log = r.output + r.err;
  EXPECT_NE(log.find("run 1 of 8: hybrid_pre-lr0.003-s1 (time left known after the first run)"),
            std::string::npos)
      << log;
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

  const std::string figures = dir.file("figures/cmp");
  const int rc = siamese::testing::run_python(std::string(SIAMESE_SOURCE_DIR) + "/scripts/plot_report.py " +
                                                  out + "/report.json --out " + figures,
                                              dir.file("plot.log"))
                     .exit_code;
  ASSERT_EQ(rc, 0) << read_all(dir.file("plot.log"));
  for (const char* png : {"cmp_curves.png", "cmp_lr.png"})
    EXPECT_GT(fs::file_size(dir.file(std::string("figures/") + png)), 1000u) << png;
}

// A setting no config has, or a sweep file's key the sweep does not know, fails before the
// first run trains, naming where and the key.
TEST(Compare, MistakesFailBeforeAnyRunStarts) {
  TempDir dir;
  const auto r = run_siamese("sweep --config configs/tiny/quickstart.yaml --topologies pre --lr 1e-3" +
                                 kTiny + " --set max_durration=4 --out " + dir.file("cmp"),
                             dir.path(), "-u WORLD_SIZE -u RANK -u MODEL_TYPE");
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
