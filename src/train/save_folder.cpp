#include "siamese/train/save_folder.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <string_view>

#include "siamese/common/durable_file.h"
#include "siamese/common/error.h"
#include "siamese/common/step_folder.h"
#include "siamese/common/user_path.h"
#include "siamese/train/checkpoint.h"

namespace siamese::train {

namespace fs = std::filesystem;

namespace {

std::optional<int64_t> step_of(const fs::path& dir) {
  bool too_large = false;
  const auto step = step_of_folder(dir.filename().string(), &too_large);
  if (too_large) spdlog::warn("{}: ignored, its step number does not fit in 64 bits", dir.string());
  return step;
}

// Folders a save or prune in progress uses: .step<N>.tmp-<pid> (being written by every rank),
// .step<N>.old-<pid> (the copy being replaced), .step<N>.del-<pid> (being pruned), and
// .step<N>.shards-<n> (optimizer shards staged by versions before every rank wrote its part).
const std::regex& scratch_pattern() {
  static const std::regex pattern("\\.(step[0-9]+)\\.(tmp|old|del|shards)-[0-9]+");
  return pattern;
}
// Renames first so that a prune cut short never leaves a folder named step<N>.
void remove_checkpoint(const fs::path& dir) {
  const fs::path doomed = scratch_path(dir, "del");
  fs::rename(dir, doomed);
  fs::remove_all(doomed);
}
}  // namespace

SaveFolderLock::SaveFolderLock(const fs::path& save_folder, const std::string& holder) {
  create_folder(save_folder, "save_folder");
  const fs::path path = save_folder / ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw Error(fmt::format("cannot open the lock file: {}", std::strerror(errno)), path.string(),
                "make save_folder writable");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    char line[256] = {};
    const ssize_t n = ::pread(fd_, line, sizeof line - 1, 0);
    ::close(fd_);
    fd_ = -1;
    // "<pid> <what it does>"; a file without the second part names the pid alone.
    std::string other = n > 0 ? std::string(line, strcspn(line, "\n")) : "unknown";
    if (const auto space = other.find(' '); space != std::string::npos) other.replace(space, 1, ": ");
    throw Error(fmt::format("another process (pid {}) holds this folder's lock and writes into it", other),
                save_folder.string(),
                "wait for it to finish or stop it, or give this run its own save_folder");
  }
  const std::string pid = std::to_string(::getpid()) + " " + holder + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0)
    spdlog::warn("{}: cannot record this process's id ({})", path.string(), std::strerror(errno));
}

SaveFolderLock::~SaveFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

void clean_save_folder(const fs::path& save_folder, const SaveFolderLock&) {
  if (!fs::is_directory(save_folder)) return;
  std::vector<fs::path> scratch;
  for (const auto& e : fs::directory_iterator(save_folder)) scratch.push_back(e.path());
  for (const auto& p : scratch) {
    std::smatch m;
    const std::string name = p.filename().string();
    if (!std::regex_match(name, m, scratch_pattern())) continue;
    const fs::path final_dir = save_folder / m[1].str();
    // A replacement cut between its two renames: the old copy is the only complete one.
    if (m[2] == "old" && !fs::exists(final_dir) && !checkpoint_problem(p)) {
      spdlog::warn("{}: restored as {} (its replacement was interrupted)", p.string(), final_dir.string());
      fs::rename(p, final_dir);
      continue;
    }
    spdlog::warn("{}: removed, left by an interrupted {}", p.string(), m[2] == "del" ? "pruning" : "save");
    fs::remove_all(p);
  }
}

void prune_checkpoints(const fs::path& save_folder, int64_t keep, int64_t resumed_step,
                       const std::set<int64_t>& written) {
  if (keep <= 0) return;
  std::vector<fs::path> prunable;
  for (const auto& [step, dir] : checkpoint_folders(save_folder))
    if ((step <= resumed_step || written.count(step)) && fs::exists(dir / kCheckpointManifest))
      prunable.push_back(dir);
  for (size_t i = 0; i + keep < prunable.size(); ++i) remove_checkpoint(prunable[i]);
}

namespace {

// The first line of every run config the trainer writes: a config.yaml without it is the
// user's own file, which the trainer never replaces.
constexpr std::string_view kRunConfigMark =
    "# The resolved config of this run, written by `siamese train`.\n";

bool written_by_a_run(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string head(kRunConfigMark.size(), '\0');
  return in.read(head.data(), std::streamsize(head.size())) && head == kRunConfigMark;
}

}  // namespace

fs::path write_run_config(const fs::path& save_folder, const std::string& config_yaml) {
  create_folder(save_folder, "save_folder");
  fs::path path = save_folder / "config.yaml";
  if (fs::exists(path) && !written_by_a_run(path)) {
    path = save_folder / "siamese_run_config.yaml";
    spdlog::info("{} is not a run's config (your own file?): left as it is; the run's config goes to {}",
                 (save_folder / "config.yaml").string(), path.string());
  }
  write_file_atomically(path, std::string(kRunConfigMark) + config_yaml);
  return path;
}

std::optional<fs::path> run_config_path(const fs::path& save_folder) {
  for (const char* name : {"siamese_run_config.yaml", "config.yaml"})
    if (const fs::path p = save_folder / name; fs::exists(p) && written_by_a_run(p)) return p;
  return std::nullopt;
}

std::vector<std::pair<int64_t, fs::path>> checkpoint_folders(const fs::path& save_folder) {
  std::vector<std::pair<int64_t, fs::path>> out;
  if (!fs::is_directory(save_folder)) return out;
  for (const auto& e : fs::directory_iterator(save_folder)) {
    if (!e.is_directory()) continue;
    if (auto s = step_of(e.path())) out.emplace_back(*s, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string last_checkpoint_note(const fs::path& save_folder) {
  const auto folders = checkpoint_folders(save_folder);
  if (folders.empty()) return "no checkpoint has been saved in " + save_folder.string() + " yet";
  return "the last checkpoint, " + folders.back().second.string() + ", is untouched";
}

std::optional<fs::path> latest_checkpoint(const fs::path& save_folder) {
  auto all = checkpoint_folders(save_folder);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const auto problem = checkpoint_problem(it->second);
    if (!problem) return it->second;
    spdlog::warn("{}: skipped, not an intact checkpoint: {}", it->second.string(), *problem);
  }
  return std::nullopt;
}

}  // namespace siamese::train
