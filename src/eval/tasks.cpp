// Formatting of OLMo's multiple-choice tasks, one function per task, following
// olmo/eval/downstream.py as summarised in ../shared/evals/README.md.
#include "siamese/eval/tasks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "siamese/common/error.h"
#include "siamese/common/text_input.h"

namespace siamese::eval {

using nlohmann::json;

namespace {

// Python's str.strip() for the ASCII whitespace this data contains.
std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Reading fields; a wrong field is a malformed line, reported by load_task with file:line.
struct BadRow : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const json& field(const json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end()) throw BadRow(fmt::format("missing field \"{}\"", key));
  return *it;
}

std::string str(const json& row, const char* key) {
  const json& v = field(row, key);
  if (!v.is_string()) throw BadRow(fmt::format("field \"{}\" must be a string", key));
  return v.get<std::string>();
}

int64_t integer(const json& row, const char* key) {
  const json& v = field(row, key);
  if (!v.is_number_integer()) throw BadRow(fmt::format("field \"{}\" must be an integer", key));
  return v.get<int64_t>();
}

std::vector<std::string> choice_texts(const json& row) {
  const json& choices = field(row, "choices");
  if (!choices.is_object()) throw BadRow("field \"choices\" must be an object");
  const json& text = field(choices, "text");
  if (!text.is_array() || text.empty())
    throw BadRow("field \"choices.text\" must be a non-empty array of strings");
  std::vector<std::string> out;
  for (const auto& t : text) {
    if (!t.is_string()) throw BadRow("field \"choices.text\" must hold strings");
    out.push_back(t.get<std::string>());
  }
  return out;
}

// Index of a letter key "A".."E" (ARC also uses "1".."5", which OLMo maps to letters).
int64_t letter_index(std::string key) {
  key = strip(key);
  if (key.size() == 1 && key[0] >= '1' && key[0] <= '5') key[0] = char('A' + (key[0] - '1'));
  if (key.size() != 1 || key[0] < 'A' || key[0] > 'E')
    throw BadRow(fmt::format("answer key \"{}\" is not one of A-E or 1-5", key));
  return key[0] - 'A';
}

// "1" -> 0, "2" -> 1, ...
int64_t one_based(const std::string& key) {
  const std::string k = strip(key);
  if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos)
    throw BadRow(fmt::format("label \"{}\" is not a positive integer", key));
  return std::stoll(k) - 1;
}

Document same_context(const std::string& ctx, const std::vector<std::string>& conts, int64_t gold,
                      const std::string& dc) {
  Document d;
  for (const auto& c : conts) d.options.push_back({ctx, " " + c, dc});
  d.gold = gold;
  return d;
}

// ARC-Easy's formatting; ARC-Challenge, basic_arithmetic and CommonsenseQA reuse it.
Document arc(const json& r) {
  return same_context("Question: " + str(r, "question") + "\nAnswer:", choice_texts(r),
                      letter_index(str(r, "answerKey")), "Answer:");
}

Document openbookqa(const json& r) {
  const std::string stem = strip(str(r, "question_stem"));
  const auto space = stem.find_last_of(' ');
  const std::string last_word = space == std::string::npos ? stem : stem.substr(space + 1);
  return same_context(str(r, "question_stem"), choice_texts(r), letter_index(str(r, "answerKey")), last_word);
}

Document piqa(const json& r) {
  return same_context("Question: " + str(r, "goal") + "\nAnswer:", {str(r, "sol1"), str(r, "sol2")},
                      integer(r, "label"), "Answer:");
}

Document winogrande(const json& r) {
  const std::string sentence = str(r, "sentence");
  const auto blank = sentence.find('_');
  if (blank == std::string::npos) throw BadRow("field \"sentence\" has no \"_\"");
  const std::string continuation = " " + strip(sentence.substr(blank + 1));
  Document d;
  for (const char* key : {"option1", "option2"}) {
    const std::string opt = str(r, key);
    d.options.push_back({sentence.substr(0, blank) + opt, continuation, opt});
  }
  d.gold = one_based(str(r, "answer"));
  return d;
}

Document sciq(const json& r) {
  return same_context(
      strip(str(r, "support")) + "\nQuestion: " + str(r, "question") + "\nAnswer:",
      {str(r, "distractor1"), str(r, "distractor2"), str(r, "distractor3"), str(r, "correct_answer")}, 3,
      "Answer:");
}

Document boolq(const json& r) {
  const json& answer = field(r, "answer");
  if (!answer.is_boolean()) throw BadRow("field \"answer\" must be true or false");
  return same_context(str(r, "passage") + "\nQuestion: " + str(r, "question") + "?\nAnswer:", {"yes", "no"},
                      answer.get<bool>() ? 0 : 1, "Answer:");
}

Document copa(const json& r) {
  const std::string premise = strip(str(r, "premise"));
  if (premise.empty()) throw BadRow("field \"premise\" is empty");
  const std::string q = str(r, "question");
  if (q != "cause" && q != "effect")
    throw BadRow(fmt::format("field \"question\" is \"{}\", not cause or effect", q));
  const std::string connector = q == "cause" ? "because" : "therefore";
  std::vector<std::string> conts;
  for (const char* key : {"choice1", "choice2"}) {
    std::string c = str(r, key);
    if (!c.empty()) c[0] = char(std::tolower(static_cast<unsigned char>(c[0])));
    conts.push_back(c);
  }
  return same_context(premise.substr(0, premise.size() - 1) + " " + connector, conts, integer(r, "label"),
                      connector);
}

Document social_iqa(const json& r) {
  return same_context("Question: " + str(r, "context") + " " + str(r, "question") + "\nAnswer:",
                      {str(r, "answerA"), str(r, "answerB"), str(r, "answerC")}, one_based(str(r, "label")),
                      "Answer:");
}

struct Spec {
  const char* label;
  Metric metric;
  std::function<Document(const json&)> format;
};

const std::map<std::string, Spec>& specs() {
  static const std::map<std::string, Spec> m = {
      {"arc_easy", {"arc_easy", Metric::Acc, arc}},
      {"arc_challenge", {"arc_challenge", Metric::LenNorm, arc}},
      {"basic_arithmetic", {"basic_arithmetic", Metric::Acc, arc}},
      {"openbookqa", {"openbook_qa", Metric::LenNorm, openbookqa}},
      {"piqa", {"piqa", Metric::LenNorm, piqa}},
      {"winogrande", {"winogrande", Metric::Acc, winogrande}},
      {"sciq", {"sciq", Metric::Acc, sciq}},
      {"boolq", {"boolq", Metric::Acc, boolq}},
      {"copa", {"copa", Metric::Acc, copa}},
      {"commonsense_qa", {"commonsense_qa", Metric::LenNorm, arc}},
      {"social_iqa", {"social_iqa", Metric::LenNorm, social_iqa}},
  };
  return m;
}

}  // namespace

const char* metric_name(Metric m) {
  switch (m) {
    case Metric::Acc:
      return "acc";
    case Metric::LenNorm:
      return "len_norm";
    case Metric::PmiDc:
      return "pmi_dc";
  }
  return "?";
}

Metric parse_metric(const std::string& name) {
  for (Metric m : {Metric::Acc, Metric::LenNorm, Metric::PmiDc})
    if (name == metric_name(m)) return m;
  throw Error(fmt::format("unknown metric \"{}\"", name), "--metric", "use acc, len_norm or pmi_dc");
}

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {
      "piqa",  "openbookqa", "arc_easy",       "arc_challenge", "winogrande",      "sciq",
      "boolq", "copa",       "commonsense_qa", "social_iqa",    "basic_arithmetic"};
  return names;
}

Task load_task(const std::string& name, const std::string& data_dir, int64_t limit) {
  auto it = specs().find(name);
  if (it == specs().end())  // OLMo's label (openbook_qa), as in `evaluators: - label: ...`
    it =
        std::find_if(specs().begin(), specs().end(), [&](const auto& kv) { return kv.second.label == name; });
  if (it == specs().end())
    throw Error(fmt::format("unknown task \"{}\"", name), "--tasks",
                fmt::format("use any of {}", fmt::join(task_names(), ",")));
  const std::string path = (std::filesystem::path(data_dir) / (it->first + ".jsonl")).string();
  if (!std::filesystem::exists(path))
    throw Error("evaluation data not found", path,
                "pass --data-dir with the folder holding <task>.jsonl (../shared/evals)");
  Task task{it->first, it->second.label, it->second.metric, {}};
  struct Enough {};
  try {
    for_each_jsonl(path, [&](int64_t line, const json& row) {
      if (limit >= 0 && int64_t(task.docs.size()) >= limit) throw Enough{};
      Document d;
      try {
        d = it->second.format(row);
      } catch (const std::exception& e) {
        throw Error(e.what(), fmt::format("{}:{}", path, line),
                    "each line must be one row of the task as described in evals/README.md");
      }
      if (d.gold < 0 || d.gold >= int64_t(d.options.size()))
        throw Error(fmt::format("gold index {} outside the {} options", d.gold, d.options.size()),
                    fmt::format("{}:{}", path, line), "fix the row's answer field");
      task.docs.push_back(std::move(d));
    });
  } catch (const Enough&) {
  }
  if (task.docs.empty()) throw Error("no documents", path, "the file must hold at least one JSON line");
  return task;
}

int64_t utf8_length(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace siamese::eval
