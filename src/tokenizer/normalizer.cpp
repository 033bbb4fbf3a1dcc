#include "normalizer.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "siamese/common/error.h"
#include "unicode.h"

namespace siamese::tokenizer {

namespace {

const UNormalizer2* icu_instance(bool compat) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* n = compat ? unorm2_getNFKDInstance(&status) : unorm2_getNFDInstance(&status);
  if (U_FAILURE(status)) throw Error(std::string("ICU normalizer unavailable: ") + u_errorName(status));
  return n;
}

const UNormalizer2* nfc_data() {
  static const UNormalizer2* n = [] {
    UErrorCode status = U_ZERO_ERROR;
    const UNormalizer2* p = unorm2_getNFCInstance(&status);
    if (U_FAILURE(status)) throw Error(std::string("ICU NFC unavailable: ") + u_errorName(status));
    return p;
  }();
  return n;
}

// HF's data is Unicode 9.0: anything younger behaves as an unassigned code point.
bool known_in_unicode9(char32_t cp) {
  UVersionInfo age;
  u_charAge(static_cast<UChar32>(cp), age);
  return age[0] < 9 || (age[0] == 9 && age[1] == 0);
}

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const uint8_t ccc = unorm2_getCombiningClass(nfc_data(), static_cast<UChar32>(cp));
  return ccc && known_in_unicode9(cp) ? ccc : 0;
}

void decompose_into(char32_t cp, bool compat, std::u32string& out) {
  if (cp < (compat ? 0xA0u : 0xC0u) || !known_in_unicode9(cp)) {
    out.push_back(cp);
    return;
  }
  UChar buf[64];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t n = unorm2_getDecomposition(icu_instance(compat), static_cast<UChar32>(cp), buf, 64, &status);
  if (n < 0 || U_FAILURE(status)) {
    out.push_back(cp);
    return;
  }
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U16_NEXT(buf, i, n, c);
    out.push_back(static_cast<char32_t>(c));
  }
}

// Canonical ordering: a stable sort of each run of non-starters by combining class.
void reorder(std::u32string& s) {
  size_t i = 0;
  while (i < s.size()) {
    if (combining_class(s[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && combining_class(s[j]) != 0) ++j;
    std::stable_sort(s.begin() + i, s.begin() + j,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
}

void compose(std::u32string& s) {
  if (s.empty()) return;
  size_t starter = std::u32string::npos;
  size_t out = 0;
  int last_ccc = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    const char32_t c = s[i];
    const int ccc = combining_class(c);
    if (starter != std::u32string::npos) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        const UChar32 r =
            unorm2_composePair(nfc_data(), static_cast<UChar32>(s[starter]), static_cast<UChar32>(c));
        if (r >= 0 && known_in_unicode9(static_cast<char32_t>(r))) {
          s[starter] = static_cast<char32_t>(r);
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = out;
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    s[out++] = c;
  }
  s.resize(out);
}

std::string normalize_run(std::string_view text, NormalForm form) {
  const bool compat = form == NormalForm::NFKC || form == NormalForm::NFKD;
  const bool recompose = form == NormalForm::NFC || form == NormalForm::NFKC;
  std::u32string cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t len;
    decompose_into(decode_utf8(text, i, len), compat, cps);
    i += len;
  }
  reorder(cps);
  if (recompose) compose(cps);
  std::string out;
  out.reserve(text.size());
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

}  // namespace

std::string normalize(std::string_view text, NormalForm form) {
  // An ASCII character never decomposes and is never the second half of a composition, so a
  // boundary right before one is a normalization boundary: each ASCII character starts a run
  // together with the non-ASCII characters after it, and only runs with non-ASCII content
  // pay for the full algorithm.
  const auto ascii = [&](size_t k) { return static_cast<unsigned char>(text[k]) < 0x80; };
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && ascii(j)) ++j;
    const size_t start = j > i ? j - 1 : j;
    out.append(text.data() + i, start - i);
    if (j == text.size()) {
      out.append(text.data() + start, j - start);
      break;
    }
    size_t end = j;
    while (end < text.size() && !ascii(end)) ++end;
    out += normalize_run(text.substr(start, end - start), form);
    i = end;
  }
  return out;
}

Normalizer Normalizer::from_json(const nlohmann::json& spec, const std::string& where) {
  Normalizer n;
  if (spec.is_null()) return n;
  const std::string type = spec.value("type", "");
  if (type == "Sequence") {
    for (const auto& sub : spec.at("normalizers")) {
      const Normalizer inner = from_json(sub, where);
      n.forms_.insert(n.forms_.end(), inner.forms_.begin(), inner.forms_.end());
    }
  } else if (type == "NFC") {
    n.forms_.push_back(NormalForm::NFC);
  } else if (type == "NFD") {
    n.forms_.push_back(NormalForm::NFD);
  } else if (type == "NFKC") {
    n.forms_.push_back(NormalForm::NFKC);
  } else if (type == "NFKD") {
    n.forms_.push_back(NormalForm::NFKD);
  } else {
    throw Error("unsupported normalizer type '" + type + "'", where + " (normalizer)",
                "supported: NFC, NFD, NFKC, NFKD and Sequence of them");
  }
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (NormalForm f : forms_) s = normalize(s, f);
  return s;
}

}  // namespace siamese::tokenizer
