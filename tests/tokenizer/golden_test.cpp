// Every record of ../shared/tokenizers/*.golden.jsonl: ids from encode() and the text from
// decode(ids, skip_special=false) must equal HF tokenizers' output exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "siamese/common/error.h"
#include "siamese/tokenizer/tokenizer.h"
#include "support/files.h"
#include "support/temp_dir.h"

using siamese::shared_dir;
using siamese::testing::tokenizer_path;

using siamese::tokenizer::Tokenizer;

namespace {

std::string show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, EveryRecordMatches) {
  const std::string name = GetParam();
  const Tokenizer tok = Tokenizer::from_file(tokenizer_path(name));
  const std::string golden = shared_dir() + "/tokenizers/" + name + ".golden.jsonl";
  std::ifstream in(golden);
  ASSERT_TRUE(in) << golden;
  std::string line;
  int line_no = 0, records = 0, id_mismatches = 0, text_mismatches = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto rec = nlohmann::json::parse(line);
    const std::string text = rec.at("text");
    const auto want = rec.at("ids").get<std::vector<int32_t>>();
    const std::string decoded = rec.at("decoded");
    ++records;
    const auto got = tok.encode(text);
    if (got != want) {
      ++id_mismatches;
      ADD_FAILURE() << golden << ":" << line_no << " ids differ for text " << nlohmann::json(text).dump()
                    << "\n  want " << show(want) << "\n  got  " << show(got);
    }
    const std::string got_text = tok.decode(want, /*skip_special=*/false);
    if (got_text != decoded) {
      ++text_mismatches;
      ADD_FAILURE() << golden << ":" << line_no << " decode differs for ids " << show(want) << "\n  want "
                    << nlohmann::json(decoded).dump() << "\n  got  " << nlohmann::json(got_text).dump();
    }
  }
  EXPECT_GT(records, 300);
  std::printf("%s: ids %d/%d matched, decode %d/%d matched\n", name.c_str(), records - id_mismatches, records,
              records - text_mismatches, records);
}

// A tokenizer file that is valid JSON of another shape is named as such, with its file (an
// array gave nlohmann's "cannot use value() with array").
TEST(TokenizerFile, JsonThatIsNotAnObjectIsNamed) {
  siamese::testing::TempDir dir;
  for (const auto& [text, shape] : {std::pair{"[1, 2]", "an array"}, {"\"gpt2\"", "a string"}}) {
    const std::string path = dir.file("tokenizer.json");
    siamese::testing::write_file(path, text);
    try {
      Tokenizer::from_file(path);
      ADD_FAILURE() << "accepted " << text;
    } catch (const siamese::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("this file holds ") + shape), std::string::npos) << msg;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllFiles, Golden,
                         ::testing::Values("gpt2", "olmo-gpt-neox-20b-pii-special", "olmo2-dolma2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
