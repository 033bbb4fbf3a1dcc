#include "siamese/config/duration.h"
#include "siamese/config/config.h"

#include <gtest/gtest.h>

#include "support/scoped_env.h"

namespace siamese {
namespace {

using testing::error_of;

TEST(Duration, StepsTokensEpochsInOlmoSyntax) {
  struct Case {
    const char* text;
    config::Duration::Unit unit;
    int64_t value;
  };
  for (const Case& c :
       {Case{"1000", config::Duration::Steps, 1000}, Case{"739_328", config::Duration::Steps, 739328},
        Case{"1e4", config::Duration::Steps, 10000}, Case{"2e9T", config::Duration::Tokens, 2000000000},
        Case{"1e11T", config::Duration::Tokens, 100000000000},
        Case{"3.5e11T", config::Duration::Tokens, 350000000000},
        Case{"1_000T", config::Duration::Tokens, 1000}, Case{"1ep", config::Duration::Epochs, 1},
        Case{"12ep", config::Duration::Epochs, 12}}) {
    const config::Duration d = c.text;
    EXPECT_EQ(d.unit(), c.unit) << c.text;
    EXPECT_EQ(d.value(), c.value) << c.text;
    EXPECT_EQ(d.text(), c.text) << "kept as written";
  }
  EXPECT_EQ(config::Duration("1e4"), config::Duration("10_000")) << "the same length, spelled twice";
  EXPECT_NE(config::Duration("1e4"), config::Duration("1e4T"));
}

// A config holds its duration parsed: set as text, read as a unit and a count.
TEST(Duration, ParsedWhenSet) {
  config::TrainConfig c;
  EXPECT_EQ(c.max_duration.value(), 10000);
  c.max_duration = "2e9T";
  EXPECT_EQ(c.max_duration.unit(), config::Duration::Tokens);
  EXPECT_EQ(c.max_duration.value(), 2000000000);
}

TEST(Duration, RejectsAnythingElseNamingTheForms) {
  for (const char* bad : {"", "T", "ep", "abc", "10 steps", "1.5", "0", "-5", "1.5ep", "2e9t", "1__000",
                          "_100", "100_", "1e30", "nan"}) {
    const std::string msg = error_of([&] { config::Duration{bad}; });
    EXPECT_NE(msg.find("max_duration"), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find("2e9T"), std::string::npos) << bad << ": " << msg;
  }
}

}  // namespace
}  // namespace siamese
