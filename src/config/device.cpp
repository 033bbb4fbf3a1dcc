#include "siamese/config/device.h"

#include "siamese/common/error.h"

namespace siamese::config {

DeviceSetting::DeviceSetting(const std::string& text) : text_(text) {
  if (text == "auto" || text == "cpu" || text == "cuda") {
    kind_ = text == "auto" ? Kind::Auto : text == "cpu" ? Kind::Cpu : Kind::Cuda;
    return;
  }
  const std::string prefix = "cuda:";
  const std::string digits = text.substr(std::min(text.size(), prefix.size()));
  if (text.rfind(prefix, 0) != 0 || digits.empty() || digits.size() > 4 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    throw Error("device \"" + text + "\" is not one of: auto, cpu, cuda, cuda:N", "device",
                "set device to one of: auto, cpu, cuda, cuda:N");
  kind_ = Kind::Cuda;
  index_ = std::stoi(digits);
}

}  // namespace siamese::config
