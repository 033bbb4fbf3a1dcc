#pragma once
#include <string>

#include "siamese/common/shared_dir.h"

using siamese::shared_dir;

inline std::string tokenizer_path(const std::string& name) {
  return shared_dir() + "/tokenizers/" + name + ".json";
}
