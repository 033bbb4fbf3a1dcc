#include "siamese/eval/text_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "../tokenizer/unicode.h"  // find_invalid_utf8, as Tokenizer::encode checks it
#include "siamese/common/error.h"
#include "siamese/eval/run_tokenizer.h"

namespace siamese::eval {

tokenizer::Tokenizer load_run_tokenizer(const config::TokenizerConfig& tokenizer,
                                        const std::string& config_file, const std::string& override_path) {
  const config::DataConfig text;  // callers that ask want a tokenizer whatever the data
  return tokenizer::Tokenizer::from_file(run_tokenizer_path(text, tokenizer, config_file, override_path));
}

TextCodec::TextCodec(const config::DataConfig& data, const config::TokenizerConfig& tokenizer,
                     const std::string& config_file, const std::string& tokenizer_override) {
  if (uses_tokenizer(data)) tok_ = load_run_tokenizer(tokenizer, config_file, tokenizer_override);
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

std::vector<int64_t> TextCodec::encode(const std::string& text, const std::string& file, int64_t offset,
                                       int64_t line) const {
  if (tok_)
    if (const size_t bad = tokenizer::find_invalid_utf8(text); bad != std::string::npos) {
      line += std::count(text.begin(), text.begin() + std::ptrdiff_t(bad), '\n');
      throw Error(
          fmt::format("invalid UTF-8 at byte {} of the file (0x{:02X}); the tokenizer reads UTF-8 text",
                      offset + int64_t(bad), static_cast<unsigned char>(text[bad])),
          file + ":" + std::to_string(line),
          "convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8 " + file + " > " + file +
              ".utf8` for Latin-1 text, or drop the bad bytes with `iconv -c -f utf-8 -t utf-8 " + file +
              " > " + file + ".utf8`, and pass the new file");
    }
  return encode(text);
}

std::string TextCodec::decode(const std::vector<int64_t>& ids) const {
  if (!tok_) return {ids.begin(), ids.end()};
  return tok_->decode(std::vector<int32_t>(ids.begin(), ids.end()));
}

}  // namespace siamese::eval
