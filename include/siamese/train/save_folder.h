#pragma once
// The life of a save_folder around its checkpoints (checkpoint.h is their format): one
// writer at a time (a lock), clean-up of what interrupted saves and prunings left, pruning
// to the newest N, the list of step<N> folders and the newest intact one, and the run's
// config.yaml written at start.
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace siamese::train {

// The one writer of a save_folder: an exclusive flock on save_folder/.lock, released when
// this object is destroyed or the process exits (however it exits). Taken by rank 0 only,
// the rank that writes. The lock file names the holder's pid and `holder` (what it does:
// "siamese train", "siamese import"), and a refused process is told both: throws
// siamese::Error when another process holds it.
class SaveFolderLock {
 public:
  SaveFolderLock(const std::filesystem::path& save_folder, const std::string& holder);
  ~SaveFolderLock();
  SaveFolderLock(const SaveFolderLock&) = delete;
  SaveFolderLock& operator=(const SaveFolderLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes what interrupted saves and prunings left (temporary and half-deleted folders)
// and puts back a checkpoint whose replacement was cut short. Safe only for the lock holder.
void clean_save_folder(const std::filesystem::path& save_folder, const SaveFolderLock& held);

// Keeps the newest `keep` checkpoints (keep <= 0 keeps all) among those a run may prune:
// the ones not newer than `resumed_step` and the ones it wrote itself (`written`). A run
// rolled back to an older checkpoint therefore never deletes the newer ones.
void prune_checkpoints(const std::filesystem::path& save_folder, int64_t keep, int64_t resumed_step,
                       const std::set<int64_t>& written);

// Writes the run's resolved config when it starts, so a run that stops before its first
// checkpoint (a diverged one) still says what it trained; `siamese report` falls back to
// it. A resumed run rewrites it with its own config. It goes to save_folder/config.yaml
// unless a config.yaml there was not written by a run (OLMo's default save_folder is ./,
// where the user's own config.yaml often is): that file is left alone and the run's config
// goes to save_folder/siamese_run_config.yaml. Returns the path written.
std::filesystem::path write_run_config(const std::filesystem::path& save_folder,
                                       const std::string& config_yaml);

// The run config write_run_config wrote under save_folder, if any.
std::optional<std::filesystem::path> run_config_path(const std::filesystem::path& save_folder);

// The step<N> folders under save_folder, oldest first (folders whose name is not a step
// number that fits in 64 bits are skipped with a warning). Complete or not: see checkpoint_problem
// (checkpoint.h).
std::vector<std::pair<int64_t, std::filesystem::path>> checkpoint_folders(
    const std::filesystem::path& save_folder);

// What a run that stops without saving leaves to resume from, for its message: "the last
// checkpoint, <save_folder>/step<N>, is untouched", or that none was saved yet. It lists the
// folders only (no hashing), so it is cheap at any model size.
std::string last_checkpoint_note(const std::filesystem::path& save_folder);

// The newest intact checkpoint under save_folder, if any; each newer one that is not
// intact is skipped with a warning saying why.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& save_folder);

}  // namespace siamese::train
