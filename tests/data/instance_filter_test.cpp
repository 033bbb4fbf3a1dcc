// OLMo-2's instance filter (data/instance_filter.h) against OLMo-core's own detector.
#include "siamese/data/instance_filter.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/temp_dir.h"

namespace siamese::data {
namespace {

struct PeriodicCase {
  int64_t max_period, min_period;
  std::vector<int64_t> tokens;
};

// A run of `times` copies of `gram` (and `extra` tokens of one more copy) inside noise drawn
// from tokens 100.., so that the run's ends are exact.
std::vector<int64_t> with_run(std::mt19937_64& rng, int64_t before, const std::vector<int64_t>& gram,
                              int64_t times, int64_t extra, int64_t after) {
  std::uniform_int_distribution<int64_t> noise(100, 10000);
  std::vector<int64_t> t;
  for (int64_t i = 0; i < before; ++i) t.push_back(noise(rng));
  for (int64_t r = 0; r < times; ++r) t.insert(t.end(), gram.begin(), gram.end());
  t.insert(t.end(), gram.begin(), gram.begin() + extra);
  for (int64_t i = 0; i < after; ++i) t.push_back(noise(rng));
  return t;
}

std::vector<PeriodicCase> periodic_cases() {
  std::mt19937_64 rng(33);
  std::vector<PeriodicCase> cases;
  // Random sequences over small alphabets repeat by chance, at every alignment.
  for (int i = 0; i < 300; ++i) {
    const int64_t n = std::uniform_int_distribution<int64_t>(0, 160)(rng);
    const int64_t alphabet = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    const int64_t max_p = std::uniform_int_distribution<int64_t>(1, 16)(rng);
    const int64_t min_p = std::uniform_int_distribution<int64_t>(1, max_p)(rng);
    std::uniform_int_distribution<int64_t> tok(0, alphabet - 1);
    PeriodicCase c{max_p, min_p, {}};
    for (int64_t j = 0; j < n; ++j) c.tokens.push_back(tok(rng));
    cases.push_back(c);
  }
  // Crafted runs: every period 1..13, run lengths around OLMo's 32, offsets that start the
  // run mid-row and end it mid-row, runs at the very start and end.
  std::uniform_int_distribution<int64_t> small(0, 9);
  for (int64_t p = 1; p <= 13; ++p)
    for (int64_t times : {2, 3, 4, 31, 32, 33}) {
      std::vector<int64_t> gram;
      for (int64_t j = 0; j < p; ++j) gram.push_back(j == 0 ? 50 : small(rng));  // 50 makes it primitive
      for (int64_t before : {int64_t{0}, p / 2, p + 1, int64_t{7}})
        for (int64_t extra : {int64_t{0}, p - 1})
          for (int64_t after : {0, 5})
            cases.push_back({13, 1, with_run(rng, before, gram, times, extra, after)});
    }
  return cases;
}

TEST(InstanceFilter, LongestRepetitionIsOlmoCoresFindPeriodicSequences) {
  testing::TempDir dir;
  const auto cases = periodic_cases();
  {
    std::ofstream in(dir.file("in.txt"));
    for (const auto& c : cases) {
      in << c.max_period << ' ' << c.min_period;
      for (int64_t t : c.tokens) in << ' ' << t;
      in << '\n';
    }
  }
  const std::string log = dir.file("log");
  ASSERT_EQ(testing::run_python(std::string(SIAMESE_SOURCE_DIR) + "/tests/data/olmo_periodic.py " +
                                    dir.file("in.txt") + " " + dir.file("out.txt"),
                                log)
                .exit_code,
            0)
      << testing::read_all(log);
  std::ifstream out(dir.file("out.txt"));
  int64_t found = 0, reaching_32 = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    int64_t expected = -1;
    ASSERT_TRUE(out >> expected) << "OLMo-core answered " << i << " of " << cases.size() << " sequences";
    const auto& c = cases[i];
    EXPECT_EQ(longest_repetition(c.tokens.data(), int64_t(c.tokens.size()), c.max_period, c.min_period),
              expected)
        << "case " << i << " (n " << c.tokens.size() << ", periods " << c.min_period << ".." << c.max_period
        << ")";
    found += expected > 0;
    reaching_32 += expected >= 32;
  }
  // The cases exercise both sides of the threshold.
  EXPECT_GT(found, 200);
  EXPECT_GT(reaching_32, 50);
}

TEST(InstanceFilter, RejectsAtMaxCountRepetitionsWithinThePeriods) {
  std::mt19937_64 rng(7);
  const std::vector<int64_t> gram = {5, 6, 7};
  config::InstanceFilterConfig olmo;
  olmo.repetition_max_count = 32;  // on, with OLMo's periods 1..13
  const auto at = with_run(rng, 10, gram, 32, 0, 10), below = with_run(rng, 10, gram, 31, 0, 10);
  EXPECT_TRUE(is_repetitive(at.data(), int64_t(at.size()), olmo));
  EXPECT_FALSE(is_repetitive(below.data(), int64_t(below.size()), olmo));
  config::InstanceFilterConfig longer = olmo;
  longer.repetition_min_period = 4;  // period 3 is no longer checked
  EXPECT_FALSE(is_repetitive(at.data(), int64_t(at.size()), longer));
  EXPECT_FALSE(is_repetitive(at.data(), int64_t(at.size()), config::InstanceFilterConfig{}));  // off
}

TEST(InstanceFilter, KeepInstancesDropsTheRepetitiveRowsInOrder) {
  std::mt19937_64 rng(3);
  config::InstanceFilterConfig cfg;
  cfg.repetition_max_count = 8;
  const int64_t T = 40;
  auto clean = [&] {
    auto t = with_run(rng, T, {1}, 0, 0, 0);
    return t;
  };
  auto repetitive = [&] { return with_run(rng, 4, {9, 8}, 10, 0, T - 24); };
  std::vector<std::vector<int64_t>> rows = {clean(), repetitive(), clean(), repetitive(), clean()};
  auto batch = torch::empty({5, T}, torch::kInt64);
  for (int64_t r = 0; r < 5; ++r) std::copy(rows[r].begin(), rows[r].end(), batch[r].data_ptr<int64_t>());
  int64_t dropped = -1;
  const auto kept = keep_instances(batch, cfg, dropped);
  EXPECT_EQ(dropped, 2);
  ASSERT_EQ(kept.size(0), 3);
  EXPECT_TRUE(torch::equal(kept, batch.index_select(0, torch::tensor({0, 2, 4}, torch::kInt64))));
}

}  // namespace
}  // namespace siamese::data
