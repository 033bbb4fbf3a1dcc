#pragma once
// How the commands that read or write text (generate, eval) turn it into a checkpoint's
// token ids and back: bytes for a model of the built-in byte-level corpus
// (data.synthetic: arithmetic), otherwise the tokenizer the run names.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "checkpoint_model.h"
#include "siamese/tokenizer/tokenizer.h"

namespace siamese::cli {

// `override_path` (--tokenizer) or the config's tokenizer.identifier.
inline tokenizer::Tokenizer load_run_tokenizer(const CheckpointModel& ck, const std::string& override_path) {
  const std::string path = override_path.empty() ? ck.config.tokenizer.identifier : override_path;
  if (!std::filesystem::exists(path))
    throw Error(fmt::format("tokenizer file \"{}\" not found", path),
                (ck.dir / "config.yaml").string() + " (tokenizer.identifier)",
                "pass --tokenizer PATH/tokenizer.json");
  return tokenizer::Tokenizer::from_file(path);
}

class TextCodec {
 public:
  TextCodec(const CheckpointModel& ck, const std::string& tokenizer_override) {
    if (ck.config.data.synthetic.empty()) tok_ = load_run_tokenizer(ck, tokenizer_override);
  }
  bool byte_level() const { return !tok_; }

  std::vector<int64_t> encode(const std::string& text) const {
    if (!tok_) {
      std::vector<int64_t> bytes;
      for (unsigned char c : text) bytes.push_back(c);
      return bytes;
    }
    const auto ids = tok_->encode(text);
    return {ids.begin(), ids.end()};
  }
  std::string decode(const std::vector<int64_t>& ids) const {
    if (!tok_) return {ids.begin(), ids.end()};
    return tok_->decode(std::vector<int32_t>(ids.begin(), ids.end()));
  }

 private:
  std::optional<tokenizer::Tokenizer> tok_;
};

}  // namespace siamese::cli
