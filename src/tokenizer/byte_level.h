#pragma once
// GPT-2's byte-to-unicode alphabet: every byte becomes one printable code point, so byte-level
// BPE works on strings without spaces or control characters. Printable bytes '!'..'~',
// U+00A1..U+00AC and U+00AE..U+00FF map to themselves; the other 68 bytes map to U+0100.. in
// byte order (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
#include <cstdint>
#include <string>
#include <string_view>

namespace siamese::tokenizer {

char32_t byte_to_symbol(uint8_t byte);
// The byte a symbol stands for, or -1 when the code point is outside the alphabet.
int symbol_to_byte(char32_t symbol);
// Maps every byte of `bytes` to the UTF-8 of its symbol.
std::string byte_level_encode(std::string_view bytes);

}  // namespace siamese::tokenizer
