#include "pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "byte_level.h"
#include "siamese/common/error.h"

namespace siamese::tokenizer {

namespace {

void parse_step(const nlohmann::json& spec, const std::string& where, std::vector<PreTokenizerStep>& steps) {
  const std::string type = spec.value("type", "");
  PreTokenizerStep step;
  if (type == "Sequence") {
    for (const auto& sub : spec.at("pretokenizers")) parse_step(sub, where, steps);
    return;
  }
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::ByteLevel;
    step.add_prefix_space = spec.value("add_prefix_space", false);
    step.use_regex = spec.value("use_regex", true);
  } else if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::Split;
    const auto& pattern = spec.at("pattern");
    if (pattern.contains("Regex")) {
      const std::string source = pattern.at("Regex").get<std::string>();
      step.regex = recognize_regex(source);
      if (!step.regex) {
        throw Error("unsupported Split regex " + nlohmann::json(source).dump(),
                    where + " (pre_tokenizer.pattern.Regex)",
                    "only the GPT-2 and cl100k patterns are implemented (src/tokenizer/"
                    "pretoken_regex.cpp); add a matcher for this pattern there");
      }
    } else {
      step.literal = pattern.at("String").get<std::string>();
      if (step.literal.empty()) throw Error("empty Split string pattern", where);
    }
    const std::string behavior = spec.value("behavior", "Isolated");
    if (behavior == "Removed")
      step.behavior = SplitBehavior::Removed;
    else if (behavior == "Isolated")
      step.behavior = SplitBehavior::Isolated;
    else if (behavior == "MergedWithPrevious")
      step.behavior = SplitBehavior::MergedWithPrevious;
    else if (behavior == "MergedWithNext")
      step.behavior = SplitBehavior::MergedWithNext;
    else if (behavior == "Contiguous")
      step.behavior = SplitBehavior::Contiguous;
    else
      throw Error("unknown Split behavior '" + behavior + "'", where + " (pre_tokenizer)");
    step.invert = spec.value("invert", false);
  } else {
    throw Error("unsupported pre_tokenizer type '" + type + "'", where + " (pre_tokenizer)",
                "supported: ByteLevel, Split (GPT-2 / cl100k regex or a string) and Sequence");
  }
  steps.push_back(std::move(step));
}

struct Segment {
  size_t begin, end;
  bool match;
};

// The pattern's matches and the gaps between them, covering `text` in order (HF find_matches).
void segments(const PreTokenizerStep& step, std::string_view text, std::vector<Segment>& out) {
  out.clear();
  if (step.regex) {
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = match_end(*step.regex, text, pos);
      out.push_back({pos, end, true});
      pos = end;
    }
  } else {
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t hit = text.find(step.literal, pos);
      if (hit == std::string_view::npos) break;
      if (hit > pos) out.push_back({pos, hit, false});
      out.push_back({hit, hit + step.literal.size(), true});
      pos = hit + step.literal.size();
    }
    if (pos < text.size()) out.push_back({pos, text.size(), false});
  }
  if (step.invert) {
    for (auto& s : out) s.match = !s.match;
  }
}

void split_piece(const PreTokenizerStep& step, std::string_view text, std::vector<std::string>& out) {
  thread_local std::vector<Segment> segs;
  segments(step, text, segs);
  const auto piece = [&](const Segment& s) { return text.substr(s.begin, s.end - s.begin); };
  switch (step.behavior) {
    case SplitBehavior::Removed:
      for (const auto& s : segs) {
        if (!s.match) out.emplace_back(piece(s));
      }
      break;
    case SplitBehavior::Isolated:
      for (const auto& s : segs) out.emplace_back(piece(s));
      break;
    case SplitBehavior::MergedWithPrevious: {
      // A match joins the piece before it, unless that piece is itself a match (as in HF).
      bool previous_match = false;
      for (const auto& s : segs) {
        if (s.match && !previous_match && !out.empty() && &s != &segs.front())
          out.back() += piece(s);
        else
          out.emplace_back(piece(s));
        previous_match = s.match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      // A match joins the piece after it, unless that piece is itself a match.
      for (size_t i = 0; i < segs.size(); ++i) {
        const bool joins = segs[i].match && i + 1 < segs.size() && !segs[i + 1].match;
        if (joins) {
          out.emplace_back(text.substr(segs[i].begin, segs[i + 1].end - segs[i].begin));
          ++i;
        } else {
          out.emplace_back(piece(segs[i]));
        }
      }
      break;
    }
    case SplitBehavior::Contiguous: {
      bool previous_match = false;
      for (const auto& s : segs) {
        if (s.match && previous_match)
          out.back() += piece(s);
        else
          out.emplace_back(piece(s));
        previous_match = s.match;
      }
      break;
    }
  }
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& spec, const std::string& where) {
  PreTokenizer p;
  if (spec.is_null()) return p;
  parse_step(spec, where, p.steps_);
  // The last ByteLevel's mapping can move into the model when no Split follows it.
  for (size_t i = p.steps_.size(); i-- > 0;) {
    if (p.steps_[i].kind == PreTokenizerStep::Kind::Split) break;
    p.steps_[i].map_bytes = false;
    p.deferred_byte_level_ = true;
    break;
  }
  const bool one_mapping =
      p.steps_.size() == 1 || (p.steps_.size() == 2 && p.steps_[0].kind == PreTokenizerStep::Kind::Split);
  if (p.newline_cut_is_safe() && p.deferred_byte_level_ && one_mapping) {
    const auto& head = p.steps_.front();
    p.single_regex_ = head.kind == PreTokenizerStep::Kind::Split ? head.regex : KnownRegex::Gpt2;
  }
  return p;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& pieces) const {
  if (text.empty()) return;
  const size_t first = pieces.size();
  pieces.emplace_back(text);
  thread_local std::vector<std::string> current;
  for (const auto& step : steps_) {
    current.assign(std::make_move_iterator(pieces.begin() + first), std::make_move_iterator(pieces.end()));
    pieces.resize(first);
    for (auto& piece : current) {
      if (step.kind == PreTokenizerStep::Kind::ByteLevel) {
        // HF prepends the space to every piece that reaches ByteLevel without one.
        if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
        const size_t before = pieces.size();
        if (step.use_regex) {
          PreTokenizerStep gpt2;
          gpt2.regex = KnownRegex::Gpt2;
          split_piece(gpt2, piece, pieces);
        } else {
          pieces.push_back(std::move(piece));
        }
        if (step.map_bytes) {
          for (size_t i = before; i < pieces.size(); ++i) pieces[i] = byte_level_encode(pieces[i]);
        }
      } else {
        split_piece(step, piece, pieces);
      }
    }
    // HF drops pieces that became empty.
    size_t keep = first;
    for (size_t i = first; i < pieces.size(); ++i) {
      if (!pieces[i].empty()) {
        if (keep != i) pieces[keep] = std::move(pieces[i]);
        ++keep;
      }
    }
    pieces.resize(keep);
  }
}

bool PreTokenizer::newline_cut_is_safe() const {
  if (steps_.empty()) return false;
  for (const auto& step : steps_) {
    if (step.kind == PreTokenizerStep::Kind::ByteLevel) {
      if (step.add_prefix_space) return false;
    } else if (!step.regex) {
      return false;
    }
  }
  // The regex must decide where pieces end: the first step is a regex split (or ByteLevel with
  // its GPT-2 regex), and everything after it only maps bytes.
  const auto& head = steps_.front();
  const bool head_is_regex = head.kind == PreTokenizerStep::Kind::Split
                                 ? head.behavior == SplitBehavior::Isolated ||
                                       (head.behavior == SplitBehavior::Removed && head.invert)
                                 : head.use_regex;
  if (!head_is_regex) return false;
  for (size_t i = 1; i < steps_.size(); ++i) {
    if (steps_[i].kind != PreTokenizerStep::Kind::ByteLevel || steps_[i].use_regex) return false;
  }
  return true;
}

}  // namespace siamese::tokenizer
