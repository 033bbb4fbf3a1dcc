#pragma once
// Reading what a finished `siamese train` run left on disk, for the end-to-end tests.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "support/files.h"

namespace siamese::testing {

// step -> the exact text of the field `key` of each training step's row in metrics.jsonl
// (bit-exact comparisons).
inline std::map<int64_t, std::string> step_values(const std::filesystem::path& folder,
                                                  const std::string& key) {
  std::map<int64_t, std::string> out;
  std::ifstream in(folder / "metrics.jsonl");
  const std::regex re("^\\{\"step\": ([0-9]+), \"tokens\": [0-9]+, .*\"" + key + "\": ([^,}]+)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out[std::stoll(m[1])] = m[2];
  }
  return out;
}

// step -> the exact text of its "loss" field.
inline std::map<int64_t, std::string> losses(const std::filesystem::path& folder) {
  return step_values(folder, "loss");
}

}  // namespace siamese::testing
