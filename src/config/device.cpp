#include "siamese/config/device.h"

namespace siamese::config {

std::optional<DeviceSetting> parse_device(const std::string& text) {
  using Kind = DeviceSetting::Kind;
  if (text == "auto") return DeviceSetting{Kind::Auto, std::nullopt};
  if (text == "cpu") return DeviceSetting{Kind::Cpu, std::nullopt};
  if (text == "cuda") return DeviceSetting{Kind::Cuda, std::nullopt};
  const std::string prefix = "cuda:";
  const std::string digits = text.substr(std::min(text.size(), prefix.size()));
  if (text.rfind(prefix, 0) != 0 || digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return DeviceSetting{Kind::Cuda, std::stoi(digits)};
}

}  // namespace siamese::config
