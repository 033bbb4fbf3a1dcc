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

TEST(Tasks, ArcWithDigitKey) {
  TempDir dir;
  auto d = one(
      dir, "arc_easy",
      R"({"id":"x","question":"Which?","choices":{"text":["a","b","c"],"label":["1","2","3"]},"answerKey":"2"})");
  ASSERT_EQ(d.options.size(), 3u);
  EXPECT_EQ(d.options[0].context, "Question: Which?\nAnswer:");
  EXPECT_EQ(d.options[2].continuation, " c");
  EXPECT_EQ(d.options[0].dc_context, "Answer:");
  EXPECT_EQ(d.gold, 1);
}

TEST(Tasks, OpenBookQa) {
  TempDir dir;
  auto d = one(
      dir, "openbookqa",
      R"({"id":"8-376","question_stem":"Frilled sharks and angler fish live far beneath the surface of the ocean, which is why they are known as","choices":{"text":["Deep sea animals","fish","Long Sea Fish","Far Sea Animals"],"label":["A","B","C","D"]},"answerKey":"A"})");
  EXPECT_EQ(d.options[0].context,
            "Frilled sharks and angler fish live far beneath the surface of the ocean, which is "
            "why they are known as");
  EXPECT_EQ(d.options[0].continuation, " Deep sea animals");
  EXPECT_EQ(d.options[0].dc_context, "as");
  EXPECT_EQ(d.gold, 0);
  EXPECT_EQ(load_task("openbookqa", dir.file("")).label, "openbook_qa");
  EXPECT_EQ(load_task("openbook_qa", dir.file("")).name, "openbookqa");
}

TEST(Tasks, WinograndeHasTwoContextsOneContinuation) {
  TempDir dir;
  auto d = one(
      dir, "winogrande",
      R"({"sentence":"Sarah was a much better surgeon than Maria so _ always got the easier cases.","option1":"Sarah","option2":"Maria","answer":"2"})");
  EXPECT_EQ(d.options[0].context, "Sarah was a much better surgeon than Maria so Sarah");
  EXPECT_EQ(d.options[1].context, "Sarah was a much better surgeon than Maria so Maria");
  EXPECT_EQ(d.options[0].continuation, " always got the easier cases.");
  EXPECT_EQ(d.options[1].continuation, d.options[0].continuation);
  EXPECT_EQ(d.options[1].dc_context, "Maria");
  EXPECT_EQ(d.gold, 1);
}

TEST(Tasks, CopaSciqBoolqSocialPiqa) {
  TempDir dir;
  auto copa = one(
      dir, "copa",
      R"({"premise":"The man turned on the faucet.","choice1":"The toilet filled with water.","choice2":"Water flowed from the spout.","question":"effect","idx":0,"label":1})");
  EXPECT_EQ(copa.options[0].context, "The man turned on the faucet therefore");
  EXPECT_EQ(copa.options[1].continuation, " water flowed from the spout.");
  EXPECT_EQ(copa.gold, 1);

  auto sciq = one(
      dir, "sciq",
      R"({"question":"Who?","distractor3":"Scopes","distractor1":"Linnaeus","distractor2":"shaw","correct_answer":"darwin","support":""})");
  EXPECT_EQ(sciq.options[0].context, "\nQuestion: Who?\nAnswer:");
  EXPECT_EQ(sciq.options[0].continuation, " Linnaeus");
  EXPECT_EQ(sciq.options[2].continuation, " Scopes");
  EXPECT_EQ(sciq.options[3].continuation, " darwin");
  EXPECT_EQ(sciq.gold, 3);

  auto boolq = one(dir, "boolq", R"({"question":"is it","answer":false,"passage":"P."})");
  EXPECT_EQ(boolq.options[0].context, "P.\nQuestion: is it?\nAnswer:");
  EXPECT_EQ(boolq.options[0].continuation, " yes");
  EXPECT_EQ(boolq.gold, 1);

  auto siqa = one(
      dir, "social_iqa",
      R"({"context":"Tracy left.","question":"Why?","answerA":"a","answerB":"b","answerC":"c","label":"3"})");
  EXPECT_EQ(siqa.options[0].context, "Question: Tracy left. Why?\nAnswer:");
  EXPECT_EQ(siqa.gold, 2);

  auto piqa = one(dir, "piqa", R"({"goal":"G","sol1":"s1","sol2":"s2","label":0})");
  EXPECT_EQ(piqa.options[1].context, "Question: G\nAnswer:");
  EXPECT_EQ(piqa.options[1].continuation, " s2");
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
