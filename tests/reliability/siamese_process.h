#pragma once
// The fault-injection tests run the real `siamese` binary as a child process
// (support/process.h): with a file size limit (a full disk), killed with SIGKILL when the
// save folder reaches a given state, or beside a second copy of itself. Everything it
// leaves is read back from disk.
#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "siamese/config/load.h"
#include "siamese/train/checkpoint.h"
#include "siamese/train/save_folder.h"
#include "support/files.h"
#include "support/free_port.h"
#include "support/process.h"
#include "support/tiny_configs.h"

namespace siamese::testing {

namespace fs = std::filesystem;
inline fs::path scratch_root() {
  return fs::temp_directory_path() / ("siamese_reliability_" + std::to_string(::getpid()));
}

// A scratch folder per test.
inline fs::path scratch(const std::string& name) {
  auto d = scratch_root() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// The scratch folders (megabytes of checkpoints per test) stay only when a test failed, to
// be looked at.
class RemoveScratchOnSuccess : public ::testing::Environment {
 public:
  void TearDown() override {
    if (::testing::UnitTest::GetInstance()->Passed()) fs::remove_all(scratch_root());
  }
};
inline ::testing::Environment* const kRemoveScratch =
    ::testing::AddGlobalTestEnvironment(new RemoveScratchOnSuccess);

// The tiny run (tests/support/tiny_configs.h) saving every step into `folder`, keeping all.
inline config::TrainConfig tiny_saving(const fs::path& folder) {
  config::TrainConfig c = tiny(folder);
  c.save_interval = 1;
  c.max_duration = "6";
  return c;
}

// Writes `c` as a resolved YAML config beside `folder` and returns `train` arguments for it.
inline std::vector<std::string> train_args(const config::TrainConfig& c,
                                           const std::vector<std::string>& extra = {}) {
  const fs::path yaml = fs::path(c.save_folder).string() + ".yaml";
  std::ofstream(yaml) << config::to_yaml(c);
  std::vector<std::string> args = {"train", yaml.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Starts `c` for 100000 steps and returns once it has logged its first step (it is then
// past start-up: holding its lock, reading its data).
inline Child start_long_run(config::TrainConfig c, const fs::path& log) {
  c.max_duration = "100000";
  Child child(train_args(c), log);
  const fs::path metrics = fs::path(c.save_folder) / "metrics.jsonl";
  for (int i = 0; i < 6000 && child.running() && !(fs::exists(metrics) && fs::file_size(metrics) > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return child;
}

// step -> the bits of its training loss, from metrics.jsonl (every line must be JSON).
inline std::map<int64_t, double> losses(const fs::path& folder) {
  std::map<int64_t, double> out;
  std::ifstream in(folder / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss") && !j.contains("event") && j["loss"].is_number())
      out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

// Names in `folder` (sorted): what a fault left behind.
inline std::vector<std::string> entries(const fs::path& folder) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(folder)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// The step<N> folders that are intact checkpoints.
inline std::vector<std::string> intact(const fs::path& folder) {
  std::vector<std::string> out;
  for (const auto& [step, dir] : train::checkpoint_folders(folder))
    if (!train::checkpoint_problem(dir)) out.push_back(dir.filename().string());
  return out;
}

// file name -> bytes, for every file of every step folder (to show nothing changed).
inline std::map<std::string, std::string> snapshot(const fs::path& folder) {
  std::map<std::string, std::string> out;
  for (const auto& [step, dir] : train::checkpoint_folders(folder))
    for (const auto& f : fs::directory_iterator(dir))
      out[dir.filename().string() + "/" + f.path().filename().string()] = read_all(f.path());
  return out;
}

// Watches a save folder, and the folders created in it (a save's temporary and staging
// folders), from construction on, so that a child started afterwards cannot get ahead of it.
class SaveWatch {
 public:
  explicit SaveWatch(const fs::path& watched) : watched_(watched) {
    fs::create_directories(watched);
    in_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    dirs_[::inotify_add_watch(in_, watched.c_str(), kEvents)] = watched;
  }
  ~SaveWatch() { ::close(in_); }
  SaveWatch(const SaveWatch&) = delete;
  SaveWatch& operator=(const SaveWatch&) = delete;

  // Returns once the `nth` event `mask` on an entry whose name starts with `prefix` happened
  // (true), or once `running()` says the children are gone (false).
  bool wait_for(uint32_t mask, const std::string& prefix, int nth, const std::function<bool()>& running) {
    alignas(inotify_event) char buffer[1 << 16];
    while (running()) {
      const ssize_t n = ::read(in_, buffer, sizeof buffer);
      if (n <= 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      for (char* p = buffer; p < buffer + n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(p);
        p += sizeof(inotify_event) + e->len;
        if (e->len == 0) continue;
        const std::string name = e->name;
        if ((e->mask & IN_CREATE) && (e->mask & IN_ISDIR) && dirs_.count(e->wd) && dirs_[e->wd] == watched_)
          dirs_[::inotify_add_watch(in_, (watched_ / name).c_str(), kEvents)] = watched_ / name;
        if ((e->mask & mask) && name.rfind(prefix, 0) == 0 && --nth == 0) return true;
      }
    }
    return false;
  }

 private:
  static constexpr uint32_t kEvents = IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE;
  fs::path watched_;
  int in_ = -1;
  std::map<int, fs::path> dirs_;
};

// Starts `args` and SIGKILLs it as soon as the save folder `watched` sees the `nth` event
// `mask` on an entry named `prefix`... (SaveWatch). Returns the outcome and whether the kill
// came before the process ended.
inline std::pair<Outcome, bool> run_killed_at(const std::vector<std::string>& args, const fs::path& watched,
                                              uint32_t mask, const std::string& prefix, int nth,
                                              const fs::path& log) {
  SaveWatch watch(watched);
  Child child(args, log);
  const bool killed = watch.wait_for(mask, prefix, nth, [&] { return child.running(); });
  if (killed) child.kill();
  return {child.wait(), killed};
}

// The ranks of a data-parallel run of `c`, started as torchrun starts them (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), each logging to `log`.r<rank>; `file_size_limits` gives some
// ranks a full disk (rank -> bytes).
inline std::vector<std::unique_ptr<Child>> start_sharded(const config::TrainConfig& c, int ranks,
                                                         const std::string& log,
                                                         const std::vector<std::string>& extra = {},
                                                         const std::map<int, long>& file_size_limits = {}) {
  const std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<Child>> children;
  for (int r = 0; r < ranks; ++r) {
    Limits limits;
    limits.env = {{"RANK", std::to_string(r)},
                  {"LOCAL_RANK", std::to_string(r)},
                  {"WORLD_SIZE", std::to_string(ranks)},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", port}};
    if (file_size_limits.count(r)) limits.file_size_bytes = file_size_limits.at(r);
    children.push_back(std::make_unique<Child>(train_args(c, extra), log + ".r" + std::to_string(r), limits));
  }
  return children;
}

// Waits for every rank; the outcome of rank 0, its output followed by the others'.
inline Outcome wait_sharded(std::vector<std::unique_ptr<Child>>& children) {
  Outcome first;
  for (size_t r = 0; r < children.size(); ++r) {
    Outcome o = children[r]->wait();
    if (r == 0)
      first = o;
    else
      first.output += "\n--- rank " + std::to_string(r) + " ---\n" + o.output;
  }
  return first;
}

}  // namespace siamese::testing
