#include "siamese/eval/text_codec.h"

#include <fmt/format.h>

#include <filesystem>

#include "siamese/common/error.h"

namespace siamese::eval {

tokenizer::Tokenizer load_run_tokenizer(const TrainConfig& config, const std::string& config_file,
                                        const std::string& override_path) {
  const std::string path = override_path.empty() ? config.tokenizer.identifier : override_path;
  if (!std::filesystem::exists(path))
    throw Error(fmt::format("tokenizer file \"{}\" not found", path),
                override_path.empty() ? config_file + " (tokenizer.identifier)" : "--tokenizer",
                "pass --tokenizer PATH/tokenizer.json");
  return tokenizer::Tokenizer::from_file(path);
}

TextCodec::TextCodec(const TrainConfig& config, const std::string& config_file,
                     const std::string& tokenizer_override) {
  if (config.data.synthetic.empty()) tok_ = load_run_tokenizer(config, config_file, tokenizer_override);
}

std::vector<int64_t> TextCodec::encode(const std::string& text) const {
  if (!tok_) {
    std::vector<int64_t> bytes;
    for (unsigned char c : text) bytes.push_back(c);
    return bytes;
  }
  const auto ids = tok_->encode(text);
  return {ids.begin(), ids.end()};
}

std::string TextCodec::decode(const std::vector<int64_t>& ids) const {
  if (!tok_) return {ids.begin(), ids.end()};
  return tok_->decode(std::vector<int32_t>(ids.begin(), ids.end()));
}

}  // namespace siamese::eval
