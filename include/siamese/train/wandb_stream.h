#pragma once
// Live Weights & Biases: rank 0 starts scripts/wandb_stream.py (copied beside the binary by
// the build) in the project's venv, which reads metrics.jsonl as rows land and logs them.
// The trainer never waits for it: W&B's network and start-up cost stay in that process, and
// a logger that dies (no wandb, no network, a bad key) is named once while training goes on;
// metrics.jsonl keeps every row, and the script uploads a finished run by hand (its usage).
// The script's stdin is a pipe held here: its end (this object gone, or the trainer killed)
// tells it to log the rest and finish.
#include <sys/types.h>

#include <filesystem>
#include <string>

#include "siamese/common/metrics_row.h"
#include "siamese/config/config.h"

namespace siamese::train {

class WandbStream : public MetricsSink {
 public:
  // Starts the streamer on `run_dir`'s rows from the end of its metrics.jsonl as it is now;
  // `config_file` is the run's resolved config, the W&B run's config. A python that cannot
  // be started is a warning, not an error.
  WandbStream(const config::WandbConfig& cfg, const std::filesystem::path& run_dir,
              const std::filesystem::path& config_file);
  // Closes the pipe and waits up to `finish_seconds` for the last rows to be logged.
  ~WandbStream() override;
  WandbStream(const WandbStream&) = delete;
  WandbStream& operator=(const WandbStream&) = delete;

  // The row is in metrics.jsonl already; this only notices a streamer that has died.
  void write(const MetricsRow& row) override;

  // The python that runs the streamer: SIAMESE_PYTHON, else the one the build used.
  static std::string python();
  // The streamer's log, which holds why it stopped.
  std::filesystem::path log_file() const { return log_; }

  static constexpr double finish_seconds = 120;

 private:
  bool reap(int options);  // true once the streamer has exited (and said so, once)

  std::filesystem::path log_;
  pid_t pid_ = -1;
  int pipe_ = -1;  // the write end; the streamer's stdin reads the other
};

}  // namespace siamese::train
