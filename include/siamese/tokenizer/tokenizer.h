#pragma once
// A HuggingFace tokenizer.json (BPE family) reimplemented in C++, exact on OLMo's tokenizers
// (../shared/tokenizers: GPT-NeoX-20B pii-special, dolma2, gpt2; see the golden tests).
//
// Pipeline of encode(), as HF's Tokenizer::encode with add_special_tokens=false:
//   1. cut out added tokens with normalized=false (leftmost, longest first) from the raw text;
//   2. normalize each remaining stretch (NFC for the NeoX file, Unicode 9.0 data like HF);
//   3. cut out added tokens with normalized=true from the normalized stretches;
//   4. pre-tokenize each stretch (ByteLevel / Split / Sequence) and run BPE on each piece.
// Post-processors are not applied: encode() never adds special tokens (none of OLMo's files
// adds any), and offsets are not computed (trim_offsets only affects offsets).
//
// Thread safety: a Tokenizer is immutable after from_file(); encode/decode may run on many
// threads at once (each thread keeps its own word cache). Copies share the loaded data.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace siamese::tokenizer {

class Tokenizer {
 public:
  // Loads tokenizer.json; throws siamese::Error naming the file and key of anything it
  // cannot represent exactly (unsupported normalizer, regex, model or decoder types).
  static Tokenizer from_file(const std::string& path);

  // Ids of `text` without special tokens added. `text` must be valid UTF-8 (siamese::Error
  // otherwise). Embedded NULs are ordinary characters.
  std::vector<int32_t> encode(std::string_view text) const;
  // Same, appending to `ids`.
  void encode_append(std::string_view text, std::vector<int32_t>& ids) const;

  // Text of `ids`. Ids outside the vocabulary are dropped, special tokens too when
  // `skip_special`. Invalid UTF-8 produced by partial byte tokens becomes U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const;

  // HF get_vocab_size(with_added_tokens=true): distinct token strings of model and added tokens.
  int64_t vocab_size() const;
  // The largest id any token has (50279 for NeoX, 100277 for dolma2, 50256 for gpt2).
  int32_t max_token_id() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;

  // The EOS id appended after each document by `siamese tokenize` unless told otherwise:
  //   - OLMo's NeoX file (sha256 ca35d872...): 50279, OLMo-1B's config eos_token_id (the
  //     added token |||IP_ADDRESS|||; see ../shared/tokenizers/README.md);
  //   - otherwise the id of "<|endoftext|>" (dolma2: 100257, gpt2: 50256);
  //   - otherwise none (std::nullopt): the caller must say.
  std::optional<int32_t> default_eos_id() const;

  const std::string& path() const;
  // File name without directory and ".json", e.g. "olmo-gpt-neox-20b-pii-special".
  const std::string& name() const;
  const std::string& sha256() const;

  // Byte offsets at which `text` may be cut so that encoding the parts and concatenating
  // gives exactly encode(text): after a '\n' that is followed by an ASCII non-space, or by a
  // space and an ASCII non-space, when the tokenizer's rules make that boundary safe
  // (returns no cuts otherwise). Cuts are at least `min_part_bytes` apart.
  std::vector<size_t> safe_cuts(std::string_view text, size_t min_part_bytes) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace siamese::tokenizer
