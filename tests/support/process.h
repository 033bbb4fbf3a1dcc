#pragma once
// The one way tests start programs: `siamese` as a user runs it, Python references, torchrun.
// A child is forked and exec'd with an argument list, never through a shell, so no test
// depends on quoting, redirection or what /bin/sh is. Output goes to files in the test's
// scratch folder, and a child that outlives its timeout is killed and reported.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "siamese/common/shared_dir.h"
#include "support/files.h"

namespace siamese::testing {

struct Outcome {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  std::string output;  // stdout, and stderr unless it had a file of its own
  std::string err;     // stderr, when it had a file of its own
  bool timed_out = false;
};

struct Limits {
  long file_size_bytes = -1;  // RLIMIT_FSIZE: writes past it fail with EFBIG, as on a full disk
  int timeout_seconds = 120;  // a hang fails the test instead of the suite
  // Set in the child's environment (a rank's RANK...); a value of nullopt removes the name.
  std::map<std::string, std::optional<std::string>> env;
  // A launcher run with its arguments, the binary and then ARGS (scripts/torchrun ...).
  std::vector<std::string> launcher;
  std::filesystem::path cwd;  // empty: the test's own
  std::filesystem::path err;  // stderr's own file; empty: with stdout into the log
};

// A started program whose output goes to `log`. Every child runs with one OpenMP thread
// (tests share 2 busy cores), the shared folder CMake found, and no MODEL_TYPE from the
// caller's shell; `limits.env` comes after those.
class Process {
 public:
  Process(const std::vector<std::string>& argv, std::filesystem::path log, const Limits& limits = {})
      : log_(std::move(log)), limits_(limits) {
    if (log_.has_parent_path()) std::filesystem::create_directories(log_.parent_path());
    pid_ = ::fork();
    if (pid_ == 0) exec(argv);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  Process(Process&& other) noexcept
      : log_(std::move(other.log_)),
        limits_(std::move(other.limits_)),
        pid_(other.pid_),
        done_(other.done_),
        outcome_(std::move(other.outcome_)) {
    other.done_ = true;  // the child is this object's now
  }
  Process& operator=(Process&&) = delete;
  // A child still running when its test ends (a failed assertion returned early) is killed.
  ~Process() {
    if (!done_ && pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  bool running() {
    if (done_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      record(status);
      return false;
    }
    return true;
  }
  void kill(int sig = SIGKILL) { ::kill(pid_, sig); }
  Outcome wait() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limits_.timeout_seconds);
    while (running()) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill();
        int status = 0;
        ::waitpid(pid_, &status, 0);
        record(status);
        outcome_.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    outcome_.output = (outcome_.timed_out ? "TIMED OUT\n" : "") + read_all(log_);
    if (!limits_.err.empty()) outcome_.err = read_all(limits_.err);
    return outcome_;
  }

 private:
  [[noreturn]] void exec(const std::vector<std::string>& argv) {
    if (!limits_.cwd.empty() && ::chdir(limits_.cwd.c_str()) != 0) ::_exit(126);
    const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(limits_.err.empty() ? fd : ::open(limits_.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 2);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::setenv("SIAMESE_SHARED_DIR", shared_dir().c_str(), 1);
    ::unsetenv("MODEL_TYPE");
    for (const auto& [name, value] : limits_.env)
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    if (limits_.file_size_bytes >= 0) {
      const rlimit r{rlim_t(limits_.file_size_bytes), rlim_t(limits_.file_size_bytes)};
      ::setrlimit(RLIMIT_FSIZE, &r);
      ::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the writer instead of failing the write
    }
    std::vector<std::string> copy = argv;
    std::vector<char*> raw;
    for (auto& a : copy) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execvp(raw[0], raw.data());
    ::_exit(127);
  }
  void record(int status) {
    done_ = true;
    if (WIFEXITED(status)) outcome_.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) outcome_.signal = WTERMSIG(status);
  }

  std::filesystem::path log_;
  Limits limits_;
  pid_t pid_ = -1;
  bool done_ = false;
  Outcome outcome_;
};

// The binary and the source folder the tests were built with, unless the environment names
// the ones they were carried to (SIAMESE_TEST_BINARY, SIAMESE_TEST_SOURCE_DIR: set by
// scripts/gpu_check.sh, whose prebuilt tests run on another machine in another folder).
inline std::string siamese_binary() {
  const char* carried = std::getenv("SIAMESE_TEST_BINARY");
  return carried && *carried ? carried : SIAMESE_BINARY;
}
inline std::string source_dir() {
  const char* carried = std::getenv("SIAMESE_TEST_SOURCE_DIR");
  return carried && *carried ? carried : SIAMESE_SOURCE_DIR;
}

// `siamese ARGS...`, after `limits.launcher` when there is one.
inline std::vector<std::string> siamese_argv(const std::vector<std::string>& args,
                                             const Limits& limits = {}) {
  std::vector<std::string> argv = limits.launcher;
  argv.push_back(siamese_binary());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// A started `siamese ARGS...`.
class Child : public Process {
 public:
  Child(const std::vector<std::string>& args, std::filesystem::path log, const Limits& limits = {})
      : Process(siamese_argv(args, limits), std::move(log), limits) {}
};

inline Outcome run(const std::vector<std::string>& argv, const std::filesystem::path& log,
                   const Limits& limits = {}) {
  return Process(argv, log, limits).wait();
}

inline Outcome run_siamese(const std::vector<std::string>& args, const std::filesystem::path& log,
                           const Limits& limits = {}) {
  return Child(args, log, limits).wait();
}

// A command line split into words as a shell would split it, quotes grouping, without
// anything else a shell does: a test that needs redirection or a pipe gets an error here.
inline std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '\'' || c == '"') {
      const size_t end = line.find(c, i + 1);
      if (end == std::string::npos) throw std::invalid_argument("unterminated quote in: " + line);
      word += line.substr(i + 1, end - i - 1);
      in_word = true;
      i = end;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(word);
      word.clear();
      in_word = false;
    } else if (std::string("<>|;&`").find(c) != std::string::npos) {
      throw std::invalid_argument(std::string("shell syntax '") + c + "' in a test's command: " + line);
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(word);
  return out;
}

// `siamese ARGS` (words) started from `cwd` (the source folder by default), stdout and
// stderr kept apart in files of `scratch`; `env` sets or removes names ("NAME=value",
// "-u NAME").
inline Outcome run_siamese(const std::string& args, const std::filesystem::path& scratch,
                           const std::string& env = "", const std::string& cwd = SIAMESE_SOURCE_DIR) {
  Limits limits;
  limits.timeout_seconds = 1800;
  limits.cwd = cwd;
  limits.err = scratch / "cli.stderr";
  const std::vector<std::string> settings = words(env);
  for (size_t i = 0; i < settings.size(); ++i) {
    if (settings[i] == "-u" && i + 1 < settings.size()) {
      limits.env[settings[++i]] = std::nullopt;
    } else {
      const size_t eq = settings[i].find('=');
      if (eq == std::string::npos) throw std::invalid_argument("not NAME=value or -u NAME: " + settings[i]);
      limits.env[settings[i].substr(0, eq)] = settings[i].substr(eq + 1);
    }
  }
  return run_siamese(words(args), scratch / "cli.stdout", limits);
}

// `siamese ARGS` (words), stdout into `log` and stderr too, or into `err` when given;
// returns the exit status (-1 when a signal ended it).
inline int run_cli(const std::string& args, const std::string& log, const std::string& err = "") {
  Limits limits;
  limits.timeout_seconds = 1800;
  limits.err = err;
  return run_siamese(words(args), log, limits).exit_code;
}

// The project's Python (the venv CMake found) running ARGS (words), output in `log`.
inline Outcome run_python(const std::string& args, const std::filesystem::path& log, Limits limits = {}) {
  if (limits.timeout_seconds == Limits{}.timeout_seconds) limits.timeout_seconds = 1800;
  std::vector<std::string> argv = words(args);
  argv.insert(argv.begin(), SIAMESE_PYTHON);
  return run(argv, log, limits);
}

// Limits that start `siamese` under scripts/torchrun, as README launches it: `nproc` ranks on
// this machine, rendezvous on `port`.
inline Limits under_torchrun(int nproc, int port, Limits limits = {}) {
  limits.launcher = {source_dir() + "/scripts/torchrun", "--nproc_per_node", std::to_string(nproc),
                     "--master_port", std::to_string(port)};
  return limits;
}

}  // namespace siamese::testing
