#pragma once
// Test helpers: environment variables set for one scope, and YAML files in a fresh folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "siamese/common/error.h"

namespace siamese::testing {

// Sets (or unsets, with nullopt) an environment variable and restores it on scope exit.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value)
      setenv(name_.c_str(), value->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A test with its own empty folder and MODEL_TYPE / WORLD_SIZE unset, so the machine's
// environment cannot change what a config means.
class ConfigTest : public ::testing::Test {
 protected:
  ConfigTest() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        std::filesystem::temp_directory_path() / (std::string("siamese_config_") + info->test_suite_name() +
                                                  "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~ConfigTest() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) const {
    const auto path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;
  ScopedEnv model_type_{"MODEL_TYPE", std::nullopt};
  ScopedEnv world_size_{"WORLD_SIZE", std::nullopt};
};

// The message of the siamese::Error `f` throws; fails the test when it throws nothing.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const siamese::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

}  // namespace siamese::testing
