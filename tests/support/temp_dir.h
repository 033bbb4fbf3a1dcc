#pragma once
// A fresh folder per test, removed afterwards.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>

#include "support/files.h"

namespace siamese::testing {

// The siamese_<suite>_<pid> folders of this test process, removed when it exits (unless
// SIAMESE_KEEP_TEST_DIRS is set, to look at a failure's files). A forked child (a rank of a
// multi-process test) exits without removing its parent's folders.
class SuiteDirs {
 public:
  static void add(const std::filesystem::path& dir) {
    static SuiteDirs dirs;
    dirs.dirs_.insert(dir);
  }
  SuiteDirs(const SuiteDirs&) = delete;
  SuiteDirs& operator=(const SuiteDirs&) = delete;
  ~SuiteDirs() {
    if (::getpid() != owner_ || std::getenv("SIAMESE_KEEP_TEST_DIRS")) return;
    std::error_code ignored;
    for (const auto& d : dirs_) std::filesystem::remove_all(d, ignored);
  }

 private:
  SuiteDirs() : owner_(::getpid()) {}
  pid_t owner_;
  std::set<std::filesystem::path> dirs_;
};

// <temp>/siamese_<suite>_<pid>/<name>, removed if it exists, its parent created: a path a
// test may hand to code that creates the folder itself. The pid keeps parallel ctest
// processes apart; the folder goes when the test process exits.
inline std::filesystem::path fresh_dir(const std::string& suite, const std::string& name) {
  const auto suite_dir =
      std::filesystem::temp_directory_path() / ("siamese_" + suite + "_" + std::to_string(::getpid()));
  SuiteDirs::add(suite_dir);
  auto d = suite_dir / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d.parent_path());
  return d;
}

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("siamese_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    return write_file(path_ / name, bytes);
  }
  // Names in the folder (to check that nothing half-written is left behind).
  int count() const {
    int n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path_)) ++n;
    return n;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace siamese::testing
