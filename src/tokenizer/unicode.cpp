#include "unicode.h"

#include <unicode/uchar.h>

#include <vector>

namespace siamese::tokenizer {

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the valid UTF-8 sequence at `pos`, or 0 with `bad` set to the length of the
// maximal invalid subpart (Unicode's "substitution of maximal subparts", as Rust does).
size_t valid_sequence(std::string_view s, size_t pos, size_t& bad) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = b(pos);
  bad = 1;
  if (b0 < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) {
      bad = k;
      return 0;
    }
    const unsigned char c = b(pos + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) {
      bad = k;
      return 0;
    }
  }
  return need + 1;
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t bad;
    const size_t n = valid_sequence(s, i, bad);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t bad;
    const size_t n = valid_sequence(bytes, i, bad);
    if (n) {
      out.append(bytes.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

namespace {

bool onig_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::vector<uint8_t> build_class_table() {
  std::vector<uint8_t> table(0x110000, kOther);
  for (UChar32 cp = 0; cp < 0x110000; ++cp) {
    if (onig_space(static_cast<char32_t>(cp))) {
      table[cp] = kSpace;
      continue;
    }
    const uint32_t mask = U_MASK(u_charType(cp));
    if (mask & U_GC_L_MASK)
      table[cp] = kLetter;
    else if (mask & U_GC_N_MASK)
      table[cp] = kNumber;
  }
  return table;
}

}  // namespace

CharClass char_class(char32_t cp) {
  static const std::vector<uint8_t> table = build_class_table();
  return cp < table.size() ? static_cast<CharClass>(table[cp]) : kOther;
}

}  // namespace siamese::tokenizer
