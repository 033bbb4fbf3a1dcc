#pragma once
// Tests of bad input: the refusal is a siamese::Error naming the key and how to fix it.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "siamese/common/error.h"

namespace siamese::testing {

// Expects `build` to throw a siamese::Error whose where() is `key` and whose fix mentions `fix_part`.
inline void expect_refused(const std::function<void()>& build, const std::string& key,
                           const std::string& fix_part) {
  try {
    build();
    ADD_FAILURE() << "accepted; expected a refusal naming " << key;
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), key);
    EXPECT_NE(e.fix().find(fix_part), std::string::npos) << e.what();
  }
}

}  // namespace siamese::testing
