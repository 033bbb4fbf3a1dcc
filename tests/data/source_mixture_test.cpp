// Weighted data mixtures (data/source_mixture.h): the instance counts are OLMo-core's for the
// same files and ratios, a source that cannot give its share is refused as OLMo-core refuses
// it, the run's tokens follow the ratios, and ranks split the one order.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

#include "siamese/common/error.h"
#include "siamese/config/sections.h"
#include "siamese/data/mixture_tally.h"
#include "siamese/data/rank_batches.h"
#include "siamese/data/source_mixture.h"
#include "support/process.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;

namespace siamese::data {
namespace {

// A raw uint16 token file of `n` tokens (OLMo's headerless layout, whose size OLMo-core reads).
std::string write_tokens(const fs::path& path, int64_t n, uint16_t salt) {
  std::vector<uint16_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = uint16_t((i * 2654435761u + salt * 977u) % 250);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  return path.string();
}

config::MixtureSourceConfig source(std::string name, double ratio, std::vector<std::string> paths,
                                   double repetition = 1, double fraction = 1) {
  return {std::move(name), ratio, std::move(paths), repetition, fraction};
}

struct Case {
  std::vector<config::MixtureSourceConfig> sources;
  int64_t requested_tokens, global_batch_tokens, sequence_length;
};

std::vector<std::vector<int64_t>> file_tokens(const std::vector<config::MixtureSourceConfig>& sources) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& s : sources) {
    out.emplace_back();
    for (const auto& p : s.paths) out.back().push_back(int64_t(fs::file_size(p) / 2));
  }
  return out;
}

// Each case: takes below 1, a repetition (take 2.4 over two files), max_source_fraction,
// remainders that Hamilton's method settles, a top-up to whole global batches, a source
// that runs out, and one whose repetition just covers it.
TEST(SourceMixture, CountsAreOlmoCoresForTheSameFilesAndRatios) {
  testing::TempDir dir;
  const auto f = [&](const std::string& name, int64_t n, uint16_t salt) {
    return write_tokens(dir.path() / name, n, salt);
  };
  const auto a1 = f("a1.npy", 10000, 1), a2 = f("a2.npy", 7013, 2), b1 = f("b1.npy", 3000, 3),
             b2 = f("b2.npy", 1999, 4), c1 = f("c1.npy", 12345, 5), d1 = f("d1.npy", 64 * 50, 6);
  const std::vector<Case> cases = {
      {{source("a", 0.5, {a1, a2}), source("b", 0.3, {b1}, 3.0), source("c", 0.2, {c1})}, 12000, 512, 64},
      {{source("a", 0.25, {a1, a2}), source("b", 0.75, {b1, b2}, 2.5)}, 11000, 256, 32},
      {{source("a", 0.6, {a1, a2}, 1, 0.5), source("c", 0.4, {c1})}, 9000, 1024, 128},
      {{source("a", 1.0 / 3, {a1}), source("c", 1.0 / 3, {c1}), source("d", 1.0 / 3, {d1})}, 7777, 384, 64},
      {{source("b", 0.9, {b1}), source("c", 0.1, {c1})}, 20000, 512, 64},
      {{source("b", 0.9, {b1}, 6.0), source("c", 0.1, {c1})}, 20000, 512, 64},
  };
  nlohmann::json spec = nlohmann::json::array();
  for (const Case& k : cases) {
    nlohmann::json sources = nlohmann::json::array();
    for (const auto& s : k.sources)
      sources.push_back({{"source_name", s.source_name},
                         {"target_ratio", s.target_ratio},
                         {"paths", s.paths},
                         {"max_repetition_ratio", s.max_repetition_ratio},
                         {"max_source_fraction", s.max_source_fraction}});
    spec.push_back({{"sources", sources},
                    {"requested_tokens", k.requested_tokens},
                    {"global_batch_tokens", k.global_batch_tokens},
                    {"sequence_length", k.sequence_length}});
  }
  std::ofstream(dir.path() / "cases.json") << spec.dump();
  const std::string log = dir.file("olmo_core.log");
  testing::Limits limits;
  limits.err = dir.file("olmo_core.stderr");
  ASSERT_EQ(testing::run_python(std::string(SIAMESE_SOURCE_DIR) + "/tests/data/olmo_core_mixture.py " +
                                    dir.file("cases.json"),
                                log, limits)
                .exit_code,
            0)
      << testing::read_all(log) << testing::read_all(dir.file("olmo_core.stderr"));

  // Their lines, case by case.
  std::vector<std::vector<std::string>> reference;
  std::istringstream in(testing::read_all(log));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("case ", 0) == 0)
      reference.emplace_back();
    else if (!reference.empty())
      reference.back().push_back(line);
  ASSERT_EQ(reference.size(), cases.size()) << testing::read_all(log);

  int refused = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(fmt::format("case {}", c));
    const Case& k = cases[c];
    std::vector<std::string> ours;
    try {
      const MixturePlan plan = plan_mixture(k.sources, file_tokens(k.sources), k.requested_tokens,
                                            k.global_batch_tokens, k.sequence_length);
      for (const auto& p : plan.pieces)
        ours.push_back(fmt::format("{} {} {}", k.sources[size_t(p.source)].source_name,
                                   k.sources[size_t(p.source)].paths[size_t(p.path)],
                                   p.instances * k.sequence_length));
    } catch (const Error& e) {
      // Both refuse, for the same source and numbers.
      ASSERT_EQ(reference[c].size(), 1u);
      EXPECT_EQ(reference[c][0].rfind("error Insufficient tokens for source: b", 0), 0u) << reference[c][0];
      EXPECT_NE(std::string(e.what()).find("source b must give 18000 tokens (target_ratio 0.9 of the run's "
                                           "20000) but can give 3000"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("raise its max_repetition_ratio to at least 6.00,"),
                std::string::npos)
          << e.what();
      ++refused;
      continue;
    }
    EXPECT_EQ(ours, reference[c]);
  }
  EXPECT_EQ(refused, 1);
}

config::DataSection mixture_section(const testing::TempDir& dir, int64_t steps) {
  config::DataSection d;
  d.sequence_length = 16;
  d.vocab_size = 256;
  d.seed = 17;
  d.global_batch = 8;
  d.requested_tokens = steps * d.global_batch * d.sequence_length;
  d.data.source_mixture = {
      source("web", 0.6,
             {write_tokens(dir.path() / "web0.npy", 16 * 2500 + 3, 1),
              write_tokens(dir.path() / "web1.npy", 16 * 1700, 2)}),
      source("code", 0.3, {write_tokens(dir.path() / "code.npy", 16 * 700, 3)}, 2.0),
      source("math", 0.1, {write_tokens(dir.path() / "math.npy", 16 * 900, 4)}),
  };
  return d;
}

// Over a run of 4096 sequences, each source's token share is its ratio within 0.5 points;
// half-way, the share of a random half of a fixed multiset is within 4 standard deviations
// of the hypergeometric spread, sqrt(p(1-p)/n (N-n)/(N-1)).
TEST(SourceMixture, TheRunsTokensFollowTheRatios) {
  testing::TempDir dir;
  const int64_t steps = 512;
  const config::DataSection d = mixture_section(dir, steps);
  const TokenDataset ds = train_dataset(d);
  ASSERT_NE(ds.mixture(), nullptr);
  EXPECT_EQ(ds.size(), steps * d.global_batch);
  MixtureTally tally(ds, d.global_batch, d.seed);
  const auto& sources = d.data.source_mixture;
  for (const int64_t at : {steps / 2, steps}) {
    SCOPED_TRACE(at);
    const auto n = tally.instances(at);
    const double total = double(at * d.global_batch), N = double(ds.size());
    for (size_t s = 0; s < sources.size(); ++s) {
      const double p = sources[s].target_ratio, share = double(n[s]) / total;
      const double spread = std::sqrt(p * (1 - p) / total * (N - total) / (N - 1));
      EXPECT_NEAR(share, p, at == steps ? 0.005 : 4 * spread + 0.005) << sources[s].source_name;
    }
  }
  // The row logs the same counts, in tokens.
  const MetricsRow row = tally.row(steps);
  EXPECT_EQ(row["event"], "mixture");
  EXPECT_EQ(row["tokens.math"].get<int64_t>(), tally.instances(steps)[2] * d.sequence_length);
}

TEST(SourceMixture, ARepeatedSourceRepeatsItsInstancesAndAShortOneIsRefused) {
  testing::TempDir dir;
  config::DataSection d = mixture_section(dir, 512);
  // 30% of 4096 instances is 1228.8: code's 700 instances are read once whole, then again in
  // part (a second piece of the same file), never a third time.
  const TokenDataset ds = train_dataset(d);
  const auto& pieces = ds.mixture()->pieces;
  int64_t code_pieces = 0, code = 0;
  for (const auto& p : pieces)
    if (p.source == 1) {
      ++code_pieces;
      code += p.instances;
    }
  EXPECT_EQ(code_pieces, 2);
  EXPECT_GT(code, 700);
  EXPECT_LE(code, 1400);
  // Repeated at most 1.5 times, code's 700 instances cannot give 1228.8.
  d.data.source_mixture[1].max_repetition_ratio = 1.5;
  try {
    (void)train_dataset(d);
    FAIL() << "a source that runs out was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(
        what.find("source code must give 19660 tokens (target_ratio 0.3 of the run's 65536) but can give "
                  "16800: it holds 11200 tokens, x max_source_fraction 1 x max_repetition_ratio 1.5"),
        std::string::npos)
        << what;
    EXPECT_NE(what.find("raise its max_repetition_ratio to at least 1.76,"), std::string::npos) << what;
    EXPECT_NE(what.find("data.source_mixture[1] (code)"), std::string::npos) << what;
  }
}

// Two ranks together read exactly the instances one rank reads, step by step.
TEST(SourceMixture, TwoRanksReadTheSequencesOneRankReads) {
  testing::TempDir dir;
  const config::DataSection d = mixture_section(dir, 64);
  RankBatches one(d, 0, 1), first(d, 0, 2), second(d, 1, 2);
  for (auto* b : {&one, &first, &second}) b->start(0, 64, false);
  for (int64_t step = 0; step < 64; ++step) {
    const torch::Tensor all = one.next(), a = first.next(), b = second.next();
    // Rank r holds rows r, r + 2, ... of the global batch.
    ASSERT_TRUE(torch::equal(all.index({torch::indexing::Slice(0, torch::indexing::None, 2)}), a)) << step;
    ASSERT_TRUE(torch::equal(all.index({torch::indexing::Slice(1, torch::indexing::None, 2)}), b)) << step;
  }
}

}  // namespace
}  // namespace siamese::data
