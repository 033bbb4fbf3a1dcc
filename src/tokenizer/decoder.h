#pragma once
// tokenizer.json "decoder": turns token strings back into text. ByteLevel (and Sequences of
// it) map each symbol back to its byte; a token holding any character outside the byte
// alphabet (e.g. an added token of raw spaces) contributes its own UTF-8 instead. The bytes
// are then decoded lossily (invalid sequences become U+FFFD). With no decoder, HF joins the
// tokens with spaces.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace siamese::tokenizer {

class Decoder {
 public:
  static Decoder from_json(const nlohmann::json& spec, const std::string& where);
  std::string decode(const std::vector<std::string_view>& tokens) const;

 private:
  bool byte_level_ = false;
};

}  // namespace siamese::tokenizer
