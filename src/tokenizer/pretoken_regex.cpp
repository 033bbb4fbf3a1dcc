#include "pretoken_regex.h"

#include "unicode.h"

namespace siamese::tokenizer {

namespace {

constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kCl100k =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Cursor {
  std::string_view text;
  char32_t cp_at(size_t pos, size_t& len) const { return decode_utf8(text, pos, len); }
  CharClass class_at(size_t pos, size_t& len) const { return char_class(cp_at(pos, len)); }
  // End of the run of characters of class `cls` starting at `pos`.
  size_t run(size_t pos, CharClass cls) const {
    while (pos < text.size()) {
      size_t len;
      if (class_at(pos, len) != cls) break;
      pos += len;
    }
    return pos;
  }
};

// The tail shared by both patterns, \s+(?!\S)|\s+ at a whitespace character: a run followed
// by a non-space gives its last character back when it has more than one.
size_t whitespace_run(const Cursor& c, size_t pos) {
  size_t end = pos, last = pos;
  while (end < c.text.size()) {
    size_t len;
    if (c.class_at(end, len) != kSpace) break;
    last = end;
    end += len;
  }
  if (end == c.text.size() || last == pos) return end;
  return last;
}

bool is_cr_lf(char ch) { return ch == '\r' || ch == '\n'; }

size_t gpt2_match(const Cursor& c, size_t pos) {
  const std::string_view t = c.text;
  if (t[pos] == '\'' && pos + 1 < t.size()) {
    const char a = t[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
    if (pos + 2 < t.size()) {
      const char b = t[pos + 2];
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
    }
  }
  size_t len;
  CharClass cls = c.class_at(pos, len);
  if (t[pos] == ' ' && pos + 1 < t.size()) {
    size_t len2;
    const CharClass next = c.class_at(pos + 1, len2);
    if (next != kSpace) return c.run(pos + 1, next);
  }
  if (cls != kSpace) return c.run(pos, cls);
  return whitespace_run(c, pos);
}

// Oniguruma's (?i) uses Unicode case folding: 's' also matches 'S' and U+017F (long s).
bool fold_eq(const Cursor& c, size_t& pos, char lower) {
  if (pos >= c.text.size()) return false;
  size_t len;
  const char32_t cp = c.cp_at(pos, len);
  const bool eq = cp == static_cast<char32_t>(lower) || cp == static_cast<char32_t>(lower - 32) ||
                  (lower == 's' && cp == 0x17F);
  if (eq) pos += len;
  return eq;
}

size_t cl100k_match(const Cursor& c, size_t pos) {
  const std::string_view t = c.text;
  if (t[pos] == '\'') {
    for (const char* alt : {"s", "t", "re", "ve", "m", "ll", "d"}) {
      size_t p = pos + 1;
      bool ok = true;
      for (const char* q = alt; *q && ok; ++q) ok = fold_eq(c, p, *q);
      if (ok) return p;
    }
  }
  size_t len;
  const CharClass cls = c.class_at(pos, len);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cls == kLetter) return c.run(pos, kLetter);
  if (cls != kNumber && !is_cr_lf(t[pos]) && pos + len < t.size()) {
    size_t len2;
    if (c.class_at(pos + len, len2) == kLetter) return c.run(pos + len, kLetter);
  }
  // \p{N}{1,3}
  if (cls == kNumber) {
    size_t end = pos;
    for (int k = 0; k < 3 && end < t.size(); ++k) {
      size_t l;
      if (c.class_at(end, l) != kNumber) break;
      end += l;
    }
    return end;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t other = std::string_view::npos;
  if (cls == kOther) {
    other = pos;
  } else if (t[pos] == ' ' && pos + 1 < t.size()) {
    size_t l;
    if (c.class_at(pos + 1, l) == kOther) other = pos + 1;
  }
  if (other != std::string_view::npos) {
    size_t end = c.run(other, kOther);
    while (end < t.size() && is_cr_lf(t[end])) ++end;
    return end;
  }
  // \s*[\r\n]+ : the whitespace run up to and including its last CR/LF.
  size_t end = pos, last_crlf = std::string_view::npos;
  while (end < t.size()) {
    size_t l;
    if (c.class_at(end, l) != kSpace) break;
    if (is_cr_lf(t[end])) last_crlf = end;
    end += l;
  }
  if (last_crlf != std::string_view::npos) return last_crlf + 1;
  return whitespace_run(c, pos);
}

}  // namespace

std::string_view regex_source(KnownRegex regex) { return regex == KnownRegex::Gpt2 ? kGpt2 : kCl100k; }

std::optional<KnownRegex> recognize_regex(std::string_view pattern) {
  if (pattern == kGpt2) return KnownRegex::Gpt2;
  if (pattern == kCl100k) return KnownRegex::Cl100k;
  return std::nullopt;
}

size_t match_end(KnownRegex regex, std::string_view text, size_t pos) {
  const Cursor c{text};
  return regex == KnownRegex::Gpt2 ? gpt2_match(c, pos) : cl100k_match(c, pos);
}

}  // namespace siamese::tokenizer
