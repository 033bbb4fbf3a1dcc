#pragma once
// tokenizer.json "added_tokens": tokens cut out of the text before pre-tokenization, with
// HF's matching rules: leftmost match, longest first, case-sensitive; `normalized: false`
// tokens are matched on the raw text and `normalized: true` ones on the normalized text;
// lstrip/rstrip absorb neighbouring whitespace and single_word refuses matches inside words.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace siamese::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A span of the text and the added token that covers it (id < 0: ordinary text).
struct TextSpan {
  size_t begin, end;
  int32_t id;
};

// Leftmost-longest matcher over one group of tokens (a byte trie).
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the string to match for `tokens[i]` (the content, normalized if needed).
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  bool empty() const { return tokens_.empty(); }
  // Cuts `text` into token spans and text spans covering it in order.
  void split(std::string_view text, std::vector<TextSpan>& out) const;

 private:
  struct Node {
    int32_t token = -1;  // index into tokens_ of a pattern ending here
    std::vector<std::pair<unsigned char, int32_t>> children;
  };
  int32_t child(int32_t node, unsigned char byte) const;
  // Index of the longest pattern starting at `pos`, with its end in `end`, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& end) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace siamese::tokenizer
