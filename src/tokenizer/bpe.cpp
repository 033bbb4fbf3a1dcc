#include "bpe.h"

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "byte_level.h"
#include "siamese/common/error.h"
#include "unicode.h"

namespace siamese::tokenizer {

namespace {

std::string optional_string(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? std::string() : it->get<std::string>();
}

// Words are cached per thread so encoding threads never contend; a full cache starts over.
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>> words;
};
constexpr size_t kMaxCachedWords = 1 << 18;
constexpr size_t kMaxCachedWordBytes = 256;

}  // namespace

Bpe Bpe::from_json(const nlohmann::json& model, const std::string& where) {
  if (model.value("type", "BPE") != "BPE") {
    throw Error("unsupported model type '" + model.value("type", "") + "'", where + " (model.type)",
                "only BPE models are implemented");
  }
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0) {
    throw Error("BPE dropout is not supported", where + " (model.dropout)", "set it to null");
  }
  Bpe bpe;
  for (const auto& [token, id] : model.at("vocab").items()) bpe.vocab_[token] = id.get<int32_t>();
  const std::string unk = optional_string(model, "unk_token");
  if (!unk.empty()) {
    const auto it = bpe.vocab_.find(unk);
    if (it == bpe.vocab_.end()) {
      throw Error("unk_token '" + unk + "' is not in the vocabulary", where + " (model.unk_token)");
    }
    bpe.unk_id_ = it->second;
  }
  bpe.fuse_unk_ = model.value("fuse_unk", false);
  bpe.byte_fallback_ = model.value("byte_fallback", false);
  bpe.ignore_merges_ = model.value("ignore_merges", false);
  bpe.continuing_subword_prefix_ = optional_string(model, "continuing_subword_prefix");
  bpe.end_of_word_suffix_ = optional_string(model, "end_of_word_suffix");

  const auto& merges = model.at("merges");
  const auto lookup = [&](const std::string& token, size_t rank) {
    const auto it = bpe.vocab_.find(token);
    if (it == bpe.vocab_.end()) {
      throw Error("merge " + std::to_string(rank) + " uses '" + token + "', which is not in the vocabulary",
                  where + " (model.merges)");
    }
    return it->second;
  };
  bpe.merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::string a, b;
    const auto& m = merges[rank];
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        throw Error(
            "merge " + std::to_string(rank) + " '" + s + "' is not two symbols separated by one space",
            where + " (model.merges)");
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else {  // ["a", "b"]
      a = m.at(0).get<std::string>();
      b = m.at(1).get<std::string>();
    }
    std::string merged = a + b.substr(std::min(b.size(), bpe.continuing_subword_prefix_.size()));
    const int32_t ia = lookup(a, rank), ib = lookup(b, rank), im = lookup(merged, rank);
    // A repeated pair keeps its last rank, as HF's map construction does.
    bpe.merges_[pair_key(ia, ib)] = Merge{static_cast<int32_t>(rank), im};
  }
  static std::atomic<uint64_t> next_key{1};
  bpe.cache_key_ = next_key++;
  return bpe;
}

std::optional<int32_t> Bpe::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// Initial symbols: one per character (with the subword prefix / word suffix), unknown ones
// replaced by <0xXX> byte tokens, the unk token, or dropped, in HF's order of preference.
void Bpe::symbol_ids(std::string_view symbols, std::vector<int32_t>& out) const {
  bool last_was_unk = false;
  std::string key;
  for (size_t i = 0; i < symbols.size();) {
    size_t len;
    decode_utf8(symbols, i, len);
    key.clear();
    if (i > 0) key += continuing_subword_prefix_;
    key.append(symbols.data() + i, len);
    if (i + len == symbols.size()) key += end_of_word_suffix_;
    const auto it = vocab_.find(key);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      last_was_unk = false;
    } else {
      bool replaced = false;
      if (byte_fallback_) {
        std::vector<int32_t> bytes;
        for (size_t k = 0; k < len; ++k) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(symbols[i + k]));
          const auto b = vocab_.find(name);
          if (b == vocab_.end()) break;
          bytes.push_back(b->second);
        }
        if (bytes.size() == len) {
          out.insert(out.end(), bytes.begin(), bytes.end());
          replaced = true;
          last_was_unk = false;
        }
      }
      if (!replaced && unk_id_) {
        if (!(fuse_unk_ && last_was_unk)) out.push_back(*unk_id_);
        last_was_unk = true;
      }
    }
    i += len;
  }
}

void Bpe::merge_word(std::string_view symbols, std::vector<int32_t>& ids) const {
  if (ignore_merges_) {
    const auto it = vocab_.find(std::string(symbols));
    if (it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> sym;
  symbol_ids(symbols, sym);
  const int n = static_cast<int>(sym.size());
  if (n < 2) {
    ids.insert(ids.end(), sym.begin(), sym.end());
    return;
  }
  // A doubly linked list of symbols and a queue of candidate merges ordered by (rank, position);
  // entries made stale by earlier merges are recognised and skipped when popped.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    const auto it = merges_.find(pair_key(sym[pos], sym[next[pos]]));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int right = next[top.pos];
    const auto it = merges_.find(pair_key(sym[top.pos], sym[right]));
    if (it == merges_.end() || it->second.id != top.id) continue;
    sym[top.pos] = top.id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push(prev[top.pos]);
    push(top.pos);
  }
  for (int i = 0; i >= 0; i = next[i]) ids.push_back(sym[i]);
}

void Bpe::encode_word(std::string_view word, bool byte_level, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  thread_local WordCache cache;
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    if (cache.owner != cache_key_) {
      cache.words.clear();
      cache.owner = cache_key_;
    }
    const auto it = cache.words.find(std::string(word));
    if (it != cache.words.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids.size();
  if (byte_level)
    merge_word(byte_level_encode(word), ids);
  else
    merge_word(word, ids);
  if (cacheable) {
    if (cache.words.size() >= kMaxCachedWords) cache.words.clear();
    cache.words.emplace(std::string(word), std::vector<int32_t>(ids.begin() + first, ids.end()));
  }
}

}  // namespace siamese::tokenizer
