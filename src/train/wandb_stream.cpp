#include "siamese/train/wandb_stream.h"

#include <fcntl.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "siamese/wandb_stream_py.h"

extern char** environ;

namespace siamese::train {

namespace fs = std::filesystem;

std::string WandbStream::python() {
  if (const char* p = std::getenv("SIAMESE_PYTHON"); p && *p) return p;
  return SIAMESE_BUILD_PYTHON;
}

WandbStream::WandbStream(const config::WandbConfig& cfg, const fs::path& run_dir, const fs::path& config_file)
    : log_(run_dir / "wandb_stream.log") {
  std::error_code ec;
  const auto size = fs::file_size(run_dir / "metrics.jsonl", ec);
  std::vector<std::string> args = {python(),
                                   "-c",
                                   kWandbStreamPy,
                                   "--run",
                                   run_dir.string(),
                                   "--config",
                                   config_file.string(),
                                   "--project",
                                   cfg.project,
                                   "--log-interval",
                                   std::to_string(cfg.log_interval),
                                   "--from-byte",
                                   std::to_string(ec ? 0 : size)};
  for (const auto& [flag, value] :
       {std::pair{"--entity", cfg.entity}, std::pair{"--group", cfg.group}, std::pair{"--name", cfg.name}})
    if (!value.empty()) args.insert(args.end(), {flag, value});
  for (const auto& tag : cfg.tags) args.insert(args.end(), {"--tag", tag});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    spdlog::warn("W&B: no pipe for the streamer ({}); metrics go to metrics.jsonl only",
                 std::strerror(errno));
    return;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  // Its own process group: a Ctrl-C meant for the trainer must not cut the upload short; the
  // trainer's exit closes the pipe, which ends it.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  const int rc = ::posix_spawn(&pid_, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(fds[1]);
    pid_ = -1;
    spdlog::warn(
        "W&B: could not start {} ({}); set SIAMESE_PYTHON to a python with wandb installed "
        "(scripts/setup.sh puts it in the venv); metrics go to metrics.jsonl only",
        args[0], std::strerror(rc));
    return;
  }
  pipe_ = fds[1];
  spdlog::info("W&B: streaming metrics to project {} (pid {}, log {})", cfg.project, pid_, log_.string());
}

bool WandbStream::reap(int options) {
  if (pid_ < 0) return true;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, options);
  if (r == 0) return false;
  const bool clean = r == pid_ && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!clean)
    spdlog::warn(
        "W&B: the streamer stopped ({}); training goes on and metrics.jsonl keeps every row; {} "
        "says why",
        r == pid_ && WIFEXITED(status)     ? "exit " + std::to_string(WEXITSTATUS(status))
        : r == pid_ && WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                           : std::string(std::strerror(errno)),
        log_.string());
  pid_ = -1;
  return true;
}

void WandbStream::write(const MetricsRow&) { reap(WNOHANG); }

WandbStream::~WandbStream() {
  if (pipe_ >= 0) ::close(pipe_);
  if (pid_ < 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(finish_seconds);
  while (!reap(WNOHANG)) {
    if (std::chrono::steady_clock::now() > deadline) {
      spdlog::warn("W&B: the streamer is still uploading after {:.0f} s; left running (pid {}, log {})",
                   finish_seconds, pid_, log_.string());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace siamese::train
