#include "decoder.h"

#include <nlohmann/json.hpp>

#include "byte_level.h"
#include "siamese/common/error.h"
#include "unicode.h"

namespace siamese::tokenizer {

Decoder Decoder::from_json(const nlohmann::json& spec, const std::string& where) {
  Decoder d;
  if (spec.is_null()) return d;
  const std::string type = spec.value("type", "");
  if (type == "ByteLevel") {
    d.byte_level_ = true;
  } else if (type == "Sequence" && spec.contains("decoders")) {
    for (const auto& sub : spec["decoders"]) {
      if (!from_json(sub, where).byte_level_) {
        throw Error("unsupported decoder in Sequence", where + " (decoder)",
                    "only ByteLevel decoders are implemented");
      }
    }
    d.byte_level_ = true;
  } else {
    throw Error("unsupported decoder type '" + type + "'", where + " (decoder)",
                "only ByteLevel decoders are implemented");
  }
  return d;
}

std::string Decoder::decode(const std::vector<std::string_view>& tokens) const {
  std::string bytes;
  if (!byte_level_) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) bytes += ' ';
      bytes += tokens[i];
    }
    return bytes;
  }
  std::string token_bytes;
  for (std::string_view token : tokens) {
    token_bytes.clear();
    bool in_alphabet = true;
    for (size_t i = 0; i < token.size() && in_alphabet;) {
      size_t len;
      const int b = symbol_to_byte(decode_utf8(token, i, len));
      if (b < 0)
        in_alphabet = false;
      else
        token_bytes.push_back(static_cast<char>(b));
      i += len;
    }
    if (in_alphabet)
      bytes += token_bytes;
    else
      bytes += token;
  }
  return utf8_lossy(bytes);
}

}  // namespace siamese::tokenizer
