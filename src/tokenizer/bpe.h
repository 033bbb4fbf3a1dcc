#pragma once
// tokenizer.json "model" of type BPE: merges applied lowest rank first (ties: leftmost), as
// HF's BPE word merging does, with byte_fallback, unk_token/fuse_unk, ignore_merges and
// continuing_subword_prefix / end_of_word_suffix. Encoded words are cached per thread.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace siamese::tokenizer {

class Bpe {
 public:
  static Bpe from_json(const nlohmann::json& model, const std::string& where);

  // Appends the ids of one pre-token. With `byte_level`, `word` holds raw bytes that are first
  // mapped to GPT-2's byte alphabet; otherwise it is already the model's symbol string.
  void encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& ids) const;

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view symbols, std::vector<int32_t>& ids) const;
  void symbol_ids(std::string_view symbols, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  uint64_t cache_key_;  // tells this model's entries apart in the per-thread caches
};

}  // namespace siamese::tokenizer
