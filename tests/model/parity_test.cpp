// The official-code golden cases (shared/golden: SiameseNorm hybrid_pre, OLMo pre,
// HybridNorm hybrid): our model, loaded with the same weights, must reproduce logits,
// loss, every gradient and the per-block streams within 1e-4 relative (float32).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "siamese/common/error.h"
#include "siamese/common/npy.h"
#include "siamese/common/shared_dir.h"
#include "siamese/model/parity.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using namespace siamese;

static fs::path golden_root() { return fs::path(siamese::shared_dir()) / "golden"; }

class GoldenCase : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenCase, MatchesOfficialCode) {
  const auto dir = golden_root() / GetParam();
  ASSERT_TRUE(fs::exists(dir / "config.json")) << "golden data missing at " << dir;
  const auto result = model::run_parity(dir.string());
  EXPECT_EQ(result.topology, GetParam());
  int grads = 0, hidden = 0, inner = 0;
  double worst_grad = 0, worst_hidden = 0, worst_inner = 0;
  for (const auto& row : result.rows) {
    EXPECT_LE(row.max_rel, 1e-4) << row.name;
    if (row.name.rfind("grad ", 0) == 0) ++grads, worst_grad = std::max(worst_grad, row.max_rel);
    if (row.name.rfind("hidden ", 0) == 0) ++hidden, worst_hidden = std::max(worst_hidden, row.max_rel);
    if (row.name.rfind("intermediate ", 0) == 0) ++inner, worst_inner = std::max(worst_inner, row.max_rel);
  }
  std::cout << "[parity] " << GetParam() << ": logits " << result.rows[0].max_rel << ", loss "
            << result.rows[1].max_rel << ", worst of " << grads << " grads " << worst_grad << ", worst of "
            << hidden << " hidden " << worst_hidden << ", worst of " << inner << " sublayer in/outputs "
            << worst_inner << " (max |diff| / max |ref|)\n";
  int inner_files = 0;  // the sublayer inputs and outputs of every block
  for (const auto& e : fs::recursive_directory_iterator(dir / "intermediates"))
    for (const char* n : {"attn_in.npy", "attn_out.npy", "ffn_in.npy", "ffn_out.npy"})
      inner_files += e.path().filename() == n;
  EXPECT_EQ(inner, inner_files);
  EXPECT_GT(inner_files, 0);
  // Every parameter's gradient and every block's streams were compared.
  int grad_files = 0, hidden_files = 0;
  for (const auto& e : fs::directory_iterator(dir / "grad")) grad_files += e.path().extension() == ".npy";
  for (const auto& e : fs::directory_iterator(dir / "hidden"))
    hidden_files += e.path().filename().string().find("_after_block_") != std::string::npos ||
                    e.path().filename() == "final_hidden.npy";
  EXPECT_EQ(grads, grad_files);
  EXPECT_EQ(hidden, hidden_files);
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenCase, ::testing::Values("pre", "hybrid", "hybrid_pre"));

// A wiring error must show: perturb one weight file's copy and parity fails.
TEST(Parity, DetectsAWrongWeight) {
  const auto src = golden_root() / "pre";
  const auto dir = siamese::testing::fresh_dir("parity", "perturbed");
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  const auto w = dir / "weights" / "transformer.blocks.1.ff_norm.weight.npy";
  write_npy(w.string(), read_npy(w.string()) * 1.01);
  EXPECT_GT(model::run_parity(dir.string()).worst_rel(), 1e-3);
  fs::remove_all(dir);
}

TEST(Parity, UnsupportedOlmoOptionFailsLoudly) {
  const auto dir = siamese::testing::fresh_dir("parity", "alibi");
  fs::remove_all(dir);
  fs::copy(golden_root() / "pre", dir, fs::copy_options::recursive);
  std::ifstream in(dir / "config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string json = ss.str();
  const std::string off = "\"alibi\": false";
  ASSERT_NE(json.find(off), std::string::npos);
  for (auto at = json.find(off); at != std::string::npos; at = json.find(off))
    json.replace(at, off.size(), "\"alibi\": true");
  std::ofstream(dir / "config.json") << json;
  try {
    model::run_parity(dir.string());
    FAIL() << "alibi accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("alibi"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Parity, CommandLineReportsAndExitsZero) {
  const auto log = siamese::testing::fresh_dir("parity", "cli.out");
  const auto r = siamese::testing::run_siamese({"parity", (golden_root() / "hybrid_pre").string()}, log);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("logits"), std::string::npos) << r.output;
  fs::remove(log);
}
