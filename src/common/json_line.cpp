#include "siamese/common/json_line.h"

namespace siamese {

std::string json_line(const nlohmann::ordered_json& value) {
  // dump() alone writes {"a":1,"b":2}; the log keeps a space after each ':' and ','.
  if (value.is_object()) {
    std::string out = "{";
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (it != value.begin()) out += ", ";
      out += json_line(nlohmann::ordered_json(it.key())) + ": " + json_line(it.value());
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + json_line(value[i]);
    return out + "]";
  }
  // NaN and inf dump as null; bytes that are not UTF-8 (a model's generated text can hold
  // any) become U+FFFD instead of throwing.
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace siamese
