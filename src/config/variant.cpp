#include "siamese/config/variant.h"

#include <fmt/format.h>

#include <sstream>

#include "siamese/common/error.h"

namespace siamese::config {

Variant parse_variant(const std::string& entry, const std::string& where) {
  Variant v;
  std::stringstream parts(entry);
  std::getline(parts, v.topology, ':');
  if (v.topology.empty())
    throw Error(fmt::format("\"{}\" names no topology", entry), where,
                "write TOPOLOGY[:dotted.key=value...], e.g. pre:model.layer_norm_type=dyt");
  v.name = v.topology;
  for (std::string o; std::getline(parts, o, ':');) {
    const size_t eq = o.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == o.size())
      throw Error(fmt::format("\"{}\": \"{}\" is not a dotted.key=value override", entry, o), where,
                  "write TOPOLOGY[:dotted.key=value...], e.g. pre:model.layer_norm_type=dyt");
    v.overrides.push_back("--" + o);
    v.name += "+" + o.substr(eq + 1);
  }
  return v;
}

}  // namespace siamese::config
