#include "added_vocabulary.h"

#include "unicode.h"

namespace siamese::tokenizer {

namespace {

// Rust's char::is_whitespace (White_Space property) and HF's word characters.
bool rust_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool word_char(char32_t cp) {
  const CharClass c = char_class(cp);
  return c == kLetter || c == kNumber || cp == '_';
}

size_t previous_char_start(std::string_view s, size_t pos) {
  do {
    --pos;
  } while (pos > 0 && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80);
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns)
    : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    first_byte_[static_cast<unsigned char>(p[0])] = true;
    int32_t node = 0;
    for (unsigned char byte : p) {
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(byte, next);
        nodes_.emplace_back();
      }
      node = next;
    }
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::child(int32_t node, unsigned char byte) const {
  for (const auto& [b, n] : nodes_[node].children) {
    if (b == byte) return n;
  }
  return -1;
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& end) const {
  int32_t node = 0, found = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) {
      found = nodes_[node].token;
      end = i + 1;
    }
  }
  return found;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSpan>& out) const {
  out.clear();
  size_t emitted = 0;  // text before this offset is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t end = 0;
    const int32_t t = longest_at(text, pos, end);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[t];
    if (token.single_word) {
      size_t len;
      const bool word_before = pos > 0 && word_char(decode_utf8(text, previous_char_start(text, pos), len));
      const bool word_after = end < text.size() && word_char(decode_utf8(text, end, len));
      if (word_before || word_after) {
        pos = end;  // HF skips this match and resumes after it
        continue;
      }
    }
    size_t begin = pos;
    if (token.lstrip) {
      while (begin > emitted) {
        const size_t p = previous_char_start(text, begin);
        size_t len;
        if (!rust_whitespace(decode_utf8(text, p, len))) break;
        begin = p;
      }
    }
    if (token.rstrip) {
      while (end < text.size()) {
        size_t len;
        if (!rust_whitespace(decode_utf8(text, end, len))) break;
        end += len;
      }
    }
    if (begin > emitted) out.push_back({emitted, begin, -1});
    out.push_back({begin, end, token.id});
    emitted = pos = end;
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

}  // namespace siamese::tokenizer
