#pragma once
// How the commands that read or write text (generate, eval) turn it into a model's token
// ids and back: bytes for a model of the built-in byte-level corpus (data.synthetic:
// arithmetic), otherwise the tokenizer the run names.
#include <optional>
#include <string>
#include <vector>

#include "siamese/config/config.h"
#include "siamese/tokenizer/tokenizer.h"

namespace siamese::eval {

// The tokenizer of run_tokenizer_path (run_tokenizer.h): --tokenizer, the config's
// tokenizer.identifier, or the run folder's copy.
tokenizer::Tokenizer load_run_tokenizer(const config::TokenizerConfig& tokenizer,
                                        const std::string& config_file, const std::string& override_path);

class TextCodec {
 public:
  TextCodec(const config::DataConfig& data, const config::TokenizerConfig& tokenizer,
            const std::string& config_file, const std::string& tokenizer_override);
  bool byte_level() const { return !tok_; }
  std::vector<int64_t> encode(const std::string& text) const;
  // `text` as read from `file` at byte `offset` (line `line`). Bytes are a byte-level
  // model's tokens as they are; a tokenizer reads UTF-8 only, and invalid UTF-8 is an Error
  // naming the file, the line and the byte offset in the file.
  std::vector<int64_t> encode(const std::string& text, const std::string& file, int64_t offset,
                              int64_t line) const;
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  std::optional<tokenizer::Tokenizer> tok_;
};

}  // namespace siamese::eval
