// metrics.jsonl lines: spacing, NaN as null, and text that is not UTF-8 (a model's decoded
// answer can be any bytes) written as U+FFFD instead of aborting the run.
#include <gtest/gtest.h>

#include <cmath>

#include "siamese/common/json_line.h"

TEST(JsonLine, SpacedNullForNonFiniteAndReplacementForBytesThatAreNotUtf8) {
  nlohmann::ordered_json row = {{"step", 3}, {"loss", NAN}, {"output", std::string("4\xff\"2")}};
  row["list"] = {1.5, 2};
  EXPECT_EQ(siamese::json_line(row),
            "{\"step\": 3, \"loss\": null, \"output\": \"4\xef\xbf\xbd\\\"2\", \"list\": [1.5, 2]}");
  EXPECT_EQ(nlohmann::json::parse(siamese::json_line(row))["output"], "4\xef\xbf\xbd\"2");
}
