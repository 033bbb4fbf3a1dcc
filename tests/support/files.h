#pragma once
// Reading and writing whole files in tests.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "siamese/common/shared_dir.h"

namespace siamese::testing {

inline std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline std::string write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

// A tokenizer of ../shared/tokenizers by its name ("olmo-gpt-neox-20b-pii-special").
inline std::string tokenizer_path(const std::string& name) {
  return shared_dir() + "/tokenizers/" + name + ".json";
}

}  // namespace siamese::testing
