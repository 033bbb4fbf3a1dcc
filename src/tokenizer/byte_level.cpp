#include "byte_level.h"

#include <array>

#include "unicode.h"

namespace siamese::tokenizer {

namespace {

struct Alphabet {
  std::array<char32_t, 256> to_symbol{};
  std::array<int16_t, 0x144> to_byte{};  // every symbol is below U+0144
  std::array<std::string, 256> utf8;
  Alphabet() {
    to_byte.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_symbol[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_symbol[b]] = static_cast<int16_t>(b);
      append_utf8(utf8[b], to_symbol[b]);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

char32_t byte_to_symbol(uint8_t byte) { return alphabet().to_symbol[byte]; }

int symbol_to_byte(char32_t symbol) {
  const auto& a = alphabet();
  return symbol < a.to_byte.size() ? a.to_byte[symbol] : -1;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += a.utf8[static_cast<uint8_t>(c)];
  return out;
}

}  // namespace siamese::tokenizer
