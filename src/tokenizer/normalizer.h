#pragma once
// tokenizer.json "normalizer": Unicode normalization forms as HuggingFace tokenizers applies
// them. HF's Rust crate (unicode-normalization-alignments 0.1.12) carries Unicode 9.0 data,
// so this implementation takes decompositions, combining classes and compositions from ICU
// but ignores every code point assigned after Unicode 9.0 (no decomposition, class 0, never
// the result of a composition). That reproduces HF on sequences whose normalization changed
// later, e.g. U+11935 U+11930 stays decomposed and U+0D3B is not reordered.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace siamese::tokenizer {

enum class NormalForm { NFC, NFD, NFKC, NFKD };

class Normalizer {
 public:
  // `spec` is the tokenizer.json "normalizer" value (null means identity).
  static Normalizer from_json(const nlohmann::json& spec, const std::string& where);

  bool identity() const { return forms_.empty(); }
  std::string apply(std::string_view text) const;
  const std::vector<NormalForm>& forms() const { return forms_; }

 private:
  std::vector<NormalForm> forms_;
};

std::string normalize(std::string_view text, NormalForm form);

}  // namespace siamese::tokenizer
