#pragma once
// Running the real `siamese` binary from tests, as a user would from a shell.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "siamese/common/shared_dir.h"
#include "support/files.h"

namespace siamese::testing {

struct CliResult {
  int code = -1;         // exit status (-1 when a signal ended it)
  std::string out, err;  // what it printed
};

// `siamese ARGS` (shell words) started from `cwd` with one OpenMP thread, the shared folder
// CMake found, and `env` (env(1) arguments: "-u NAME NAME=value ...") in front; stdout and
// stderr are captured separately through files in `scratch`.
inline CliResult run_siamese(const std::string& args, const std::filesystem::path& scratch,
                             const std::string& env = "", const std::string& cwd = SIAMESE_SOURCE_DIR) {
  const std::string out = (scratch / "cli.stdout").string(), err = (scratch / "cli.stderr").string();
  const std::string cmd = "cd '" + cwd + "' && env " + env +
                          " OMP_NUM_THREADS=1 SIAMESE_SHARED_DIR=" + shared_dir() + " " + SIAMESE_BINARY +
                          " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_all(out), read_all(err)};
}

// `siamese ARGS` with stdout into `log` and stderr too, or into `err` when given; returns the
// exit status.
inline int run_cli(const std::string& args, const std::string& log, const std::string& err = "") {
  const std::string cmd = "OMP_NUM_THREADS=1 SIAMESE_SHARED_DIR=" + shared_dir() + " " + SIAMESE_BINARY +
                          " " + args + " > " + log + (err.empty() ? " 2>&1" : " 2> " + err);
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Any shell command, its output into `log`; returns the exit status.
inline int sh(const std::string& command, const std::string& log) {
  const int status = std::system((command + " > " + log + " 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace siamese::testing
