// stream_stats_interval: the rows a real run logs equal the statistics of its checkpoints on
// the same sample (analysis/stream_stats.h, what `siamese analyze` computes), logging them
// leaves the training bit for bit as it was, and the values mean what they say: RMS against
// a direct computation, the largest attention logit against the scores written out.
#include "siamese/train/stream_stats_log.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "siamese/common/metrics_row.h"
#include "siamese/data/rank_batches.h"
#include "siamese/model/attention.h"
#include "siamese/train/checkpoint_model.h"
#include "siamese/train/trainer.h"
#include "support/run_files.h"
#include "support/temp_dir.h"
#include "support/tiny_configs.h"

namespace siamese::train {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> rows_of(const fs::path& run, const std::string& event) {
  std::vector<nlohmann::json> out;
  read_metrics_rows((run / "metrics.jsonl").string(), [&](const nlohmann::json& row, const std::string&) {
    if (row.value("event", "") == event) out.push_back(row);
  });
  return out;
}

}  // namespace

// hybrid_pre (streams x and y) and mhc (mixing weights): the rows at steps 4 and 8 are the
// checkpoints' statistics on the trainer's sample, and the losses are those of a run without.
TEST(StreamStats, TheRowsAreTheCheckpointsStatisticsAndTrainingIsUnchanged) {
  for (const std::string topology : {"hybrid_pre", "mhc"}) {
    SCOPED_TRACE(topology);
    testing::TempDir dir;
    config::TrainConfig plain = testing::tiny(dir.path() / "plain");
    testing::set_topology(plain.model, topology);
    plain.save_interval = 4;
    ASSERT_EQ(train::train(plain), 0);
    config::TrainConfig c = plain;
    c.save_folder = (dir.path() / "stats").string();
    c.stream_stats_interval = 4;
    ASSERT_EQ(train::train(c), 0);
    EXPECT_EQ(testing::losses(c.save_folder), testing::losses(plain.save_folder));

    const auto rows = rows_of(c.save_folder, metric::kStreamStatsEvent);
    ASSERT_EQ(rows.size(), 2u);
    const data::RankBatches batches(config::data_section(c), 0, 1);
    const auto sample = data::spread_sample(batches.dataset(), c.device_train_microbatch_size);
    for (const auto& row : rows) {
      const int64_t step = row["step"];
      auto ck = load_checkpoint_model((fs::path(c.save_folder) / ("step" + std::to_string(step))).string(),
                                      torch::kCPU);
      const MetricsRow want = stream_stats_row(step, analysis::stream_stats(*ck.model, sample));
      EXPECT_EQ(nlohmann::json::parse(want.dump()), row) << "step " << step;
      const size_t layers = size_t(c.model.n_layers);
      EXPECT_EQ(row["max_attn_logit"].size(), layers);
      EXPECT_EQ(row["sublayer_rms.ffn"].size(), layers);
      if (topology == "hybrid_pre") {
        EXPECT_EQ(row["rms.x"].size(), layers + 1);
        EXPECT_EQ(row["rms.y"].size(), layers + 1);
      } else {
        bool mixing = false;
        for (const auto& [key, v] : row.items()) mixing = mixing || key.rfind("mixing.", 0) == 0;
        EXPECT_TRUE(mixing) << row.dump();
      }
    }
  }
}

// The numbers against direct computations on a tiny pre model: the stream's RMS after the
// embeddings is that of the token plus position embeddings, and the largest logit is the largest causal entry
// of the scores written out from q and k.
TEST(StreamStats, RmsAndTheLargestLogitAreWhatTheyName) {
  auto cfg = testing::tiny_model("pre", {16, 2, 2, 61, 64, 12});
  cfg.rope = false;
  torch::manual_seed(2);
  model::Transformer m(cfg);
  m->eval();
  const auto ids = torch::randint(0, 61, {3, 12});
  const auto stats = analysis::stream_stats(*m, ids);
  auto emb = m->wte(ids);
  if (m->wpe) emb = emb + m->wpe(torch::arange(12));  // learned positions without RoPE
  EXPECT_NEAR(stats.stream_rms.at("x")[0], emb.square().mean(-1).sqrt().mean().item<double>(), 1e-6);

  auto& attn = *m->blocks[0]->as<model::BlockImpl>()->attn;
  const auto x = torch::randn({2, 12, 16});
  const auto qkv = attn.att_proj(x);
  const auto parts = qkv.split(16, -1);
  auto heads = [](const torch::Tensor& t) { return t.view({2, 12, 2, 8}).transpose(1, 2); };
  const auto scores = torch::matmul(heads(parts[0]), heads(parts[1]).transpose(-1, -2)) / std::sqrt(8.0);
  const auto causal = torch::ones({12, 12}, torch::kBool).tril();
  const double want =
      scores.masked_fill(causal.logical_not(), -std::numeric_limits<float>::infinity()).max().item<double>();
  EXPECT_NEAR(attn.max_logit(x).item<double>(), want, 1e-5 * std::max(1.0, std::abs(want)));
}

}  // namespace siamese::train
