#pragma once
// UTF-8 and the character classes the tokenizer regexes use, with the semantics of
// HuggingFace tokenizers (Rust `str`, Oniguruma character classes).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace siamese::tokenizer {

// Decodes the code point at `pos` of valid UTF-8 and stores its byte length in `len`.
inline char32_t decode_utf8(std::string_view s, size_t pos, size_t& len) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    len = 2;
    return ((b0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[pos + 1]) & 0x3Fu);
  }
  if (b0 < 0xF0) {
    len = 3;
    return ((b0 & 0x0Fu) << 12) | ((static_cast<unsigned char>(s[pos + 1]) & 0x3Fu) << 6) |
           (static_cast<unsigned char>(s[pos + 2]) & 0x3Fu);
  }
  len = 4;
  return ((b0 & 0x07u) << 18) | ((static_cast<unsigned char>(s[pos + 1]) & 0x3Fu) << 12) |
         ((static_cast<unsigned char>(s[pos + 2]) & 0x3Fu) << 6) |
         (static_cast<unsigned char>(s[pos + 3]) & 0x3Fu);
}

void append_utf8(std::string& out, char32_t cp);

// Byte offset of the first byte that breaks UTF-8 validity (overlong forms, surrogates and
// code points above U+10FFFF are invalid, as for Rust's `str`), or npos when `s` is valid.
size_t find_invalid_utf8(std::string_view s);

// Decodes bytes the way Rust's String::from_utf8_lossy does: every maximal invalid
// subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Oniguruma's classes as HF's regexes see them: \p{L} (Lu Ll Lt Lm Lo), \p{N} (Nd Nl No) and
// \s (exactly U+0009-000D, U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029,
// U+202F, U+205F, U+3000 -- not U+001C-001F, U+180E, U+200B, U+2060 or U+FEFF).
enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

CharClass char_class(char32_t cp);

}  // namespace siamese::tokenizer
