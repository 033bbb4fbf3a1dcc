#include "siamese/config/interpolate.h"

#include <gtest/gtest.h>

#include <map>

#include "siamese/common/error.h"
#include "support/scoped_env.h"

namespace siamese {
namespace {

using testing::error_of;
using testing::ScopedEnv;

std::string lookup(const std::string& key) {
  static const std::map<std::string, std::string> values = {
      {"run_name", "OLMo-1B"}, {"model.d_model", "2048"}, {"save_interval", "1000"}};
  const auto it = values.find(key);
  if (it == values.end()) throw Error("no key " + key);
  return it->second;
}

TEST(Interpolate, KeysDottedKeysAndPlainText) {
  EXPECT_EQ(config::interpolate("plain", lookup), "plain");
  EXPECT_EQ(config::interpolate("${run_name}", lookup), "OLMo-1B");
  EXPECT_EQ(config::interpolate("runs/${run_name}-d${model.d_model}/x", lookup), "runs/OLMo-1B-d2048/x");
  EXPECT_EQ(config::interpolate("${ save_interval }", lookup), "1000");
}

TEST(Interpolate, EnvironmentWithAndWithoutDefault) {
  ScopedEnv set("SIAMESE_TEST_VAR", "/scratch");
  ScopedEnv unset("SIAMESE_TEST_UNSET", std::nullopt);
  EXPECT_EQ(config::interpolate("${oc.env:SIAMESE_TEST_VAR}/ckpt", lookup), "/scratch/ckpt");
  EXPECT_EQ(config::interpolate("${oc.env:SIAMESE_TEST_VAR,/default}", lookup), "/scratch");
  EXPECT_EQ(config::interpolate("${oc.env:SIAMESE_TEST_UNSET,/default}/ckpt", lookup), "/default/ckpt");
  // OLMo's nesting: the default is itself an interpolation.
  EXPECT_EQ(config::interpolate("${oc.env:SIAMESE_TEST_UNSET,${run_name}}", lookup), "OLMo-1B");
  const std::string msg = error_of([] { config::interpolate("${oc.env:SIAMESE_TEST_UNSET}", lookup); });
  EXPECT_NE(msg.find("SIAMESE_TEST_UNSET is not set"), std::string::npos) << msg;
  EXPECT_NE(msg.find("${oc.env:SIAMESE_TEST_UNSET,default}"), std::string::npos) << msg;
}

TEST(Interpolate, PathChooseTakesTheFirstExistingPath) {
  EXPECT_EQ(config::interpolate("${path.choose:/no/such/dir,/tmp}", lookup), "/tmp");
  EXPECT_EQ(config::interpolate("${path.choose:/no/such/a,/no/such/b}", lookup), "/no/such/b");
}

TEST(Interpolate, EscapeRoundTrips) {
  EXPECT_EQ(config::interpolate("\\${run_name}", lookup), "${run_name}");
  for (const std::string literal : {"${run_name}", "a${b}c${", "\\${x}", "no dollar"})
    EXPECT_EQ(config::interpolate(config::escape_interpolation(literal), lookup), literal) << literal;
}

TEST(Interpolate, MalformedTextIsAnError) {
  EXPECT_NE(error_of([] { config::interpolate("${run_name", lookup); }).find("unterminated"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              config::interpolate("${oc.nope:X}", lookup);
            }).find("unknown interpolation resolver 'oc.nope'"),
            std::string::npos);
  EXPECT_NE(error_of([] { config::interpolate("${missing}", lookup); }).find("no key missing"),
            std::string::npos);
}

}  // namespace
}  // namespace siamese
