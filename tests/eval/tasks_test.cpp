// OLMo's formatting of each task (the README's example rows) and malformed-line reports.
#include <gtest/gtest.h>

#include "siamese/common/error.h"
#include "siamese/eval/tasks.h"
#include "support/files.h"
#include "support/temp_dir.h"

using siamese::shared_dir;
using siamese::testing::TempDir;

using namespace siamese::eval;

namespace {

Document one(const TempDir& dir, const std::string& task, const std::string& line) {
  dir.write(task + ".jsonl", line + "\n");
  return load_task(task, dir.file("")).docs.at(0);
}

std::string error_of(const std::string& task, const std::string& dir) {
  try {
    load_task(task, dir);
  } catch (const siamese::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// One row per task: a JSONL line, the fields of some options as OLMo formats them, and the
// gold index.
struct Field {
  size_t option;
  std::string Option::*member;
  std::string want;
};
struct FormatCase {
  std::string task, line;
  std::vector<Field> fields;
  int64_t gold;
  size_t n_options;
};

TEST(Tasks, EachTaskIsFormattedAsOlmoFormatsIt) {
  const auto C = &Option::context, K = &Option::continuation, D = &Option::dc_context;
  const std::vector<FormatCase> cases = {
      {"arc_easy",
       R"({"id":"x","question":"Which?","choices":{"text":["a","b","c"],"label":["1","2","3"]},"answerKey":"2"})",
       {{0, C, "Question: Which?\nAnswer:"}, {2, K, " c"}, {0, D, "Answer:"}},
       1,
       3},
      {"openbookqa",
       R"({"id":"8-376","question_stem":"Frilled sharks and angler fish live far beneath the surface of the ocean, which is why they are known as","choices":{"text":["Deep sea animals","fish","Long Sea Fish","Far Sea Animals"],"label":["A","B","C","D"]},"answerKey":"A"})",
       {{0, C,
         "Frilled sharks and angler fish live far beneath the surface of the ocean, which is why they are "
         "known as"},
        {0, K, " Deep sea animals"},
        {0, D, "as"}},
       0,
       4},
      // Two contexts, one continuation.
      {"winogrande",
       R"({"sentence":"Sarah was a much better surgeon than Maria so _ always got the easier cases.","option1":"Sarah","option2":"Maria","answer":"2"})",
       {{0, C, "Sarah was a much better surgeon than Maria so Sarah"},
        {1, C, "Sarah was a much better surgeon than Maria so Maria"},
        {0, K, " always got the easier cases."},
        {1, K, " always got the easier cases."},
        {1, D, "Maria"}},
       1,
       2},
      {"copa",
       R"({"premise":"The man turned on the faucet.","choice1":"The toilet filled with water.","choice2":"Water flowed from the spout.","question":"effect","idx":0,"label":1})",
       {{0, C, "The man turned on the faucet therefore"}, {1, K, " water flowed from the spout."}},
       1,
       2},
      {"sciq",
       R"({"question":"Who?","distractor3":"Scopes","distractor1":"Linnaeus","distractor2":"shaw","correct_answer":"darwin","support":""})",
       {{0, C, "\nQuestion: Who?\nAnswer:"}, {0, K, " Linnaeus"}, {2, K, " Scopes"}, {3, K, " darwin"}},
       3,
       4},
      {"boolq",
       R"({"question":"is it","answer":false,"passage":"P."})",
       {{0, C, "P.\nQuestion: is it?\nAnswer:"}, {0, K, " yes"}},
       1,
       2},
      {"social_iqa",
       R"({"context":"Tracy left.","question":"Why?","answerA":"a","answerB":"b","answerC":"c","label":"3"})",
       {{0, C, "Question: Tracy left. Why?\nAnswer:"}},
       2,
       3},
      {"piqa",
       R"({"goal":"G","sol1":"s1","sol2":"s2","label":0})",
       {{1, C, "Question: G\nAnswer:"}, {1, K, " s2"}},
       0,
       2},
  };
  TempDir dir;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.task);
    const Document d = one(dir, c.task, c.line);
    ASSERT_EQ(d.options.size(), c.n_options);
    for (const auto& f : c.fields) {
      ASSERT_LT(f.option, d.options.size());
      EXPECT_EQ(d.options[f.option].*f.member, f.want) << "option " << f.option;
    }
    EXPECT_EQ(d.gold, c.gold);
  }
  TempDir obqa;
  one(obqa, "openbookqa", cases[1].line);
  EXPECT_EQ(load_task("openbookqa", obqa.file("")).label, "openbook_qa");
  EXPECT_EQ(load_task("openbook_qa", obqa.file("")).name, "openbookqa");
}

TEST(Tasks, MalformedLinesNameFileAndLine) {
  TempDir dir;
  const std::string good = R"({"goal":"G","sol1":"s1","sol2":"s2","label":0})";
  dir.write("piqa.jsonl", good + "\n" + R"({"sol1":"s1","sol2":"s2","label":0})" + "\n");
  auto e = error_of("piqa", dir.file(""));
  EXPECT_NE(e.find("piqa.jsonl:2"), std::string::npos) << e;
  EXPECT_NE(e.find("goal"), std::string::npos) << e;

  dir.write("piqa.jsonl", good + "\n" + good + "\n{\"goal\": \"G\", \n");
  e = error_of("piqa", dir.file(""));
  EXPECT_NE(e.find("piqa.jsonl:3"), std::string::npos) << e;

  dir.write("piqa.jsonl", R"({"goal":"G","sol1":"s1","sol2":"s2","label":"0"})"
                          "\n");
  e = error_of("piqa", dir.file(""));
  EXPECT_NE(e.find("piqa.jsonl:1"), std::string::npos) << e;
  EXPECT_NE(e.find("integer"), std::string::npos) << e;

  dir.write("piqa.jsonl", good + "\n" + R"({"goal":"G","sol1":"s1","sol2":"s2","label":2})" + "\n");
  e = error_of("piqa", dir.file(""));
  EXPECT_NE(e.find("piqa.jsonl:2"), std::string::npos) << e;
  EXPECT_NE(e.find("gold index 2"), std::string::npos) << e;

  EXPECT_NE(error_of("hellaswag", dir.file("")).find("unknown task"), std::string::npos);
}

TEST(Tasks, SharedFilesLoadWithTheirRowCounts) {
  const std::string evals = shared_dir() + "/evals";
  const std::vector<std::pair<std::string, size_t>> rows = {
      {"arc_easy", 570},        {"arc_challenge", 299}, {"basic_arithmetic", 3000},
      {"openbookqa", 500},      {"piqa", 1838},         {"winogrande", 1267},
      {"sciq", 1000},           {"boolq", 3270},        {"copa", 100},
      {"commonsense_qa", 1221}, {"social_iqa", 1954}};
  for (const auto& [name, n] : rows) EXPECT_EQ(load_task(name, evals).docs.size(), n) << name;
  EXPECT_EQ(load_task("copa", evals, 7).docs.size(), 7u);
}

TEST(Tasks, Utf8LengthCountsCodePoints) {
  EXPECT_EQ(utf8_length(" caf\xc3\xa9"), 5);
  EXPECT_EQ(utf8_length("\xe2\x82\xac"), 1);
}
