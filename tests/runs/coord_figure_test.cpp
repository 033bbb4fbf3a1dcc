// docs/results.md's coordinate-check figures, through the real binary and plot script at a
// size that fits CI: `siamese coord-check --out` of a tiny model at two widths, then
// scripts/plot_coord_check.py of its CSV; a CSV of another kind is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/process.h"
#include "support/temp_dir.h"

using siamese::testing::read_all;
using siamese::testing::run_siamese;
using siamese::testing::TempDir;

namespace fs = std::filesystem;

namespace {

siamese::testing::Outcome plot(const TempDir& dir, const std::string& args) {
  return siamese::testing::run_python(
      std::string(SIAMESE_SOURCE_DIR) + "/scripts/plot_coord_check.py " + args, dir.file("plot.log"));
}

}  // namespace

TEST(CoordFigure, TheCommandsCsvDrawsOneRowPerFileAndAForeignCsvIsRefusedByName) {
  TempDir dir;
  for (const std::string p : {"standard", "mup"}) {
    const auto r = run_siamese(
        "coord-check configs/tiny/quickstart.yaml --model.n_layers=2 --model.n_heads=2"
        " --model.parametrization=" +
            p + " --widths 32,64 --depths none --steps 2 --out " + dir.file(p + ".csv"),
        dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.output << r.err;
  }
  const std::string out = dir.file("figures/coord");
  auto r = plot(dir, dir.file("standard.csv") + " " + dir.file("mup.csv") +
                         " --labels standard,mup --axis width --formats png,svg --out " + out);
  ASSERT_EQ(r.exit_code, 0) << read_all(dir.file("plot.log"));
  for (const std::string f : {".png", ".svg"}) EXPECT_GT(fs::file_size(out + f), 10000u) << f;
  // Two rows of four panels, each titled with its file's label and kind.
  const std::string svg = read_all(out + ".svg");
  for (const std::string title : {"standard: attn_out", "mup: logits"})
    EXPECT_NE(svg.find(title), std::string::npos) << title;

  // The depth axis of a file written with --depths none has no rows.
  r = plot(dir, dir.file("mup.csv") + " --axis depth --out " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(read_all(dir.file("plot.log")).find("no rows for --axis depth"), std::string::npos)
      << read_all(dir.file("plot.log"));
  std::ofstream(dir.file("metrics.csv")) << "step,loss\n1,2.5\n";
  r = plot(dir, dir.file("metrics.csv") + " --out " + out);
  EXPECT_EQ(r.exit_code, 2);
  const std::string log = read_all(dir.file("plot.log"));
  EXPECT_NE(log.find("metrics.csv: not a siamese coord-check CSV"), std::string::npos) << log;
  EXPECT_EQ(plot(dir, dir.file("mup.csv") + " --labels a,b --out " + out).exit_code, 2);
}
