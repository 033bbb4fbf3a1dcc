#pragma once
// OLMo's max_duration syntax: steps "1000" / "739_328" / "1e4", tokens "2e9T", epochs "1ep".
#include <cstdint>
#include <string>

namespace siamese::config {

struct Duration {
  enum Unit { Steps, Tokens, Epochs };
  Unit unit = Steps;
  int64_t value = 0;  // > 0
};

// Throws siamese::Error (naming max_duration and the accepted forms) on anything else.
Duration parse_duration(const std::string& text);

}  // namespace siamese::config
