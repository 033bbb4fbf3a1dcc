#pragma once
// Where the shared inputs live: $SIAMESE_SHARED_DIR when set, else the path CMake found.
#include <cstdlib>
#include <string>

inline std::string shared_dir() {
  const char* env = std::getenv("SIAMESE_SHARED_DIR");
  return env && *env ? env : SIAMESE_SHARED_DIR;
}

inline std::string tokenizer_path(const std::string& name) {
  return shared_dir() + "/tokenizers/" + name + ".json";
}
