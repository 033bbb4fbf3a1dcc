#pragma once
// The `device` setting (and the --device flags of the subcommands): auto, cpu, cuda (the
// rank's local GPU) or cuda:N. Parsed here so that one rule reads the text.
#include <optional>
#include <string>

namespace siamese::config {

struct DeviceSetting {
  enum class Kind { Auto, Cpu, Cuda };
  Kind kind = Kind::Auto;
  std::optional<int> index;  // cuda:N
};

// nullopt when `text` is none of the forms above.
std::optional<DeviceSetting> parse_device(const std::string& text);

}  // namespace siamese::config
