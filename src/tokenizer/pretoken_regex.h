#pragma once
// The two pre-tokenization regexes of OLMo's tokenizers, matched by hand-written code with
// Oniguruma's semantics (leftmost match, ordered alternation, greedy with backtracking):
//   GPT-2 (ByteLevel use_regex; gpt2.json and the NeoX file):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   cl100k (Split in olmo2-dolma2.json):
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//     \s*[\r\n]+|\s+(?!\S)|\s+
// Both match at every position of non-empty text, so their matches tile it.
#include <cstddef>
#include <optional>
#include <string_view>

namespace siamese::tokenizer {

enum class KnownRegex { Gpt2, Cl100k };

// The pattern text as tokenizer.json spells it.
std::string_view regex_source(KnownRegex regex);
std::optional<KnownRegex> recognize_regex(std::string_view pattern);

// End (byte offset) of the match that starts at `pos` < text.size() in valid UTF-8 `text`.
size_t match_end(KnownRegex regex, std::string_view text, size_t pos);

}  // namespace siamese::tokenizer
