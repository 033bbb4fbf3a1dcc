#pragma once
// tokenizer.json "pre_tokenizer": ByteLevel, Split and Sequence of them, as HF applies them.
// Each step refines the current pieces. ByteLevel's byte-to-symbol mapping is left to the
// model when nothing after it looks at the pieces (the common case), so the BPE cache can be
// keyed on raw bytes; `maps_bytes()` says whether the pieces still need that mapping.
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pretoken_regex.h"

namespace siamese::tokenizer {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
  enum class Kind { ByteLevel, Split } kind = Kind::ByteLevel;
  // ByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;
  bool map_bytes = true;  // false for the last ByteLevel when the model does the mapping
  // Split: a known regex, or a literal string when `regex` is empty.
  std::optional<KnownRegex> regex;
  std::string literal;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
};

class PreTokenizer {
 public:
  static PreTokenizer from_json(const nlohmann::json& spec, const std::string& where);

  // Appends the pre-tokens of `text` (one added-token-free stretch) to `pieces`.
  void split(std::string_view text, std::vector<std::string>& pieces) const;

  // True when the model must still map each piece's bytes to the byte-level alphabet.
  bool maps_bytes() const { return deferred_byte_level_; }

  // True when cutting a text right after a '\n' that is followed by an ASCII non-space, or by
  // a space and an ASCII non-space, never changes the pre-tokens (so long documents can be
  // encoded in parallel pieces). Holds for the GPT-2 and cl100k regexes without prefix spaces.
  bool newline_cut_is_safe() const;

  // The regex whose matches are exactly the pre-tokens, when the steps reduce to that (one
  // regex split keeping every match, then at most a deferred byte mapping): lets callers
  // iterate pieces as views of the text without building strings.
  std::optional<KnownRegex> single_regex() const { return single_regex_; }

  const std::vector<PreTokenizerStep>& steps() const { return steps_; }

 private:
  std::vector<PreTokenizerStep> steps_;
  bool deferred_byte_level_ = false;
  std::optional<KnownRegex> single_regex_;
};

}  // namespace siamese::tokenizer
