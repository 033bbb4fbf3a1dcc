// The trainer's data path on its loader threads (data.num_workers): two token files read
// through their memory maps, the shared batch order, the instance filter. What the threads
// load must be what one thread loads; scripts/sanitize.sh runs this under ThreadSanitizer.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "siamese/data/rank_batches.h"
#include "support/temp_dir.h"

namespace fs = std::filesystem;
using siamese::data::RankBatches;

namespace {

// A raw uint16 token file of `n` tokens; every seventh instance of 16 is one token repeated,
// which the instance filter below rejects.
fs::path write_rank_tokens(const fs::path& dir, const std::string& name, int64_t n, uint16_t salt) {
  std::vector<uint16_t> tokens(n);
  for (int64_t i = 0; i < n; ++i)
    tokens[i] = (i / 16) % 7 == 3 ? 5 : static_cast<uint16_t>((i * 2654435761u + salt) % 1000);
  const fs::path path = dir / name;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size() * 2));
  return path;
}

siamese::config::TrainConfig rank_config(const fs::path& dir, int64_t workers) {
  siamese::config::TrainConfig cfg;
  cfg.seed = 11;
  cfg.global_train_batch_size = 8;
  cfg.model.max_sequence_length = 16;
  cfg.model.vocab_size = 1000;
  cfg.model.embedding_size = 1024;
  cfg.data.paths = {write_rank_tokens(dir, "a.bin", 16 * 100 + 5, 1).string(),
                    write_rank_tokens(dir, "b.bin", 16 * 61, 2).string()};
  cfg.data.instance_filter.repetition_max_count = 8;
  cfg.data.num_workers = workers;
  return cfg;
}

// Every batch of steps [first, end) of `rank` of 2.
std::vector<torch::Tensor> load_steps(const siamese::config::TrainConfig& cfg, int rank, int64_t first,
                                      int64_t end) {
  RankBatches batches(siamese::config::data_section(cfg), rank, 2);
  batches.start(first, end, /*pin_memory=*/false);
  std::vector<torch::Tensor> out;
  for (int64_t step = first; step < end; ++step) out.push_back(batches.next());
  return out;
}

}  // namespace

// 40 steps cross the 20-step epoch, so the threads also share the order's reshuffle.
TEST(RankBatches, LoaderThreadsGiveWhatOneThreadLoadsAcrossEpochs) {
  const fs::path dir = siamese::testing::fresh_dir("rank_batches_test", "epochs");
  fs::create_directories(dir);
  const auto inline_cfg = rank_config(dir, 0);
  ASSERT_EQ(RankBatches(siamese::config::data_section(inline_cfg), 0, 2).steps_per_epoch(),
            20);  // 161 instances, batches of 8
  int64_t filtered = 0;
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    const auto expected = load_steps(inline_cfg, rank, 0, 40);
    for (const auto& b : expected) filtered += 4 - b.size(0);
    const auto threaded = load_steps(rank_config(dir, 3), rank, 0, 40);
    ASSERT_EQ(threaded.size(), expected.size());
    for (size_t s = 0; s < expected.size(); ++s) EXPECT_TRUE(torch::equal(threaded[s], expected[s])) << s;
    // A resumed run starts mid-epoch and loads the same steps.
    const auto resumed = load_steps(rank_config(dir, 3), rank, 27, 40);
    for (size_t s = 0; s < resumed.size(); ++s) EXPECT_TRUE(torch::equal(resumed[s], expected[27 + s])) << s;
  }
  EXPECT_GT(filtered, 0);  // the filter was on the threads' path
}
