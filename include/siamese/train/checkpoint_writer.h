#pragma once
// Writes one rank's part of a checkpoint on a background thread, from host copies taken at
// the step boundary (snapshot_checkpoint), while training goes on; rank 0's thread then seals
// the checkpoint: it waits for every other rank's report (a small file in the shared staging
// folder, so no collective runs beside the training's), writes the manifest last and renames
// the folder into place. The writer runs no collectives: the checkpoint manager agrees across
// ranks on whether each save held (checkpoint_manager.h).
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "siamese/train/checkpoint.h"

namespace siamese::train {

struct SaveJob {
  std::filesystem::path save_folder;
  int64_t step = 0;
  PartLayout layout;
  std::vector<CheckpointFile> files;  // this rank's, from snapshot_checkpoint
  std::string config_yaml;            // the manifest's copy (rank 0)
  long staging_id = 0;                // rank 0's pid: names the staging folder on every rank
};

// The folder every rank of a save writes into: .step<N>.tmp-<staging_id>.
std::filesystem::path staging_folder(const std::filesystem::path& save_folder, int64_t step, long staging_id);

class CheckpointWriter {
 public:
  // Gets the seconds from start() until the checkpoint was in place.
  using Sealed = std::function<void(const std::filesystem::path& step_folder, double seconds)>;
  CheckpointWriter() = default;
  // Abandons a save in flight: its staging folder stays for the next start to remove, and
  // the previous checkpoint is the newest intact one.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Starts writing `job` (none may be in flight). On rank 0, `sealed` runs on the writing
  // thread once the checkpoint is in place (pruning, the log line).
  void start(SaveJob job, Sealed sealed = {});
  bool in_flight() const { return thread_.joinable(); }
  // Blocks until this rank's files are written; rethrows what failed (a full disk).
  void wait_written();
  // Rank 0, once every rank's files are written: blocks until the checkpoint is sealed, or
  // rethrows why it was not.
  void wait_sealed();
  // Stops the save (rank 0 no longer waits for reports), joins the thread and removes the
  // staging folder. Only once no rank writes into it any more (after wait_written on all).
  void discard();
  // Seconds from start() until this rank's files were written (rank 0: until sealed).
  double seconds() const { return seconds_; }

 private:
  void run(const SaveJob& job, const Sealed& sealed);
  void join();

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool written_ = false, finished_ = false, abandoned_ = false;
  std::exception_ptr write_error_, seal_error_;
  std::filesystem::path staging_;
  double seconds_ = 0;
};

}  // namespace siamese::train
