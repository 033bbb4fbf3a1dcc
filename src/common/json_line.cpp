#include "siamese/common/json_line.h"

namespace siamese {

std::string json_line(const nlohmann::ordered_json& value) {
  // dump() alone writes {"a":1,"b":2}; the log keeps a space after each ':' and ','.
  if (value.is_object()) {
    std::string out = "{";
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (it != value.begin()) out += ", ";
      out += nlohmann::json(it.key()).dump() + ": " + json_line(it.value());
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + json_line(value[i]);
    return out + "]";
  }
  return value.dump();  // NaN and inf dump as null
}

}  // namespace siamese
