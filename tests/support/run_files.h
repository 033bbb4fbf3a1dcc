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

// step -> the exact text of its "loss" field in metrics.jsonl (bit-exact comparisons).
inline std::map<int64_t, std::string> losses(const std::filesystem::path& folder) {
  std::map<int64_t, std::string> out;
  std::ifstream in(folder / "metrics.jsonl");
  static const std::regex re("^\\{\"step\": ([0-9]+), \"tokens\": [0-9]+, \"loss\": ([^,]+),");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out[std::stoll(m[1])] = m[2];
  }
  return out;
}

}  // namespace siamese::testing
