// The bad-step rule on its own: what a step's finiteness and loss scale make the run do.
#include "siamese/train/bad_step_policy.h"

#include <gtest/gtest.h>

namespace {

using siamese::train::BadStepPolicy;
using Verdict = BadStepPolicy::Verdict;

TEST(BadStepPolicy, SkipsUpToTheAllowanceThenStops) {
  const BadStepPolicy policy(2);
  int64_t bad = 0;
  EXPECT_EQ(policy.judge(true, true, 0, bad), Verdict::Continue);
  EXPECT_EQ(policy.judge(false, true, 0, bad), Verdict::Skip);
  EXPECT_EQ(policy.judge(true, false, 0, bad), Verdict::Skip);
  EXPECT_EQ(bad, 2);
  EXPECT_EQ(policy.judge(false, false, 0, bad), Verdict::Stop);
  EXPECT_EQ(bad, 2);
}

TEST(BadStepPolicy, AnFp16OverflowIsSkippedUncountedWhileTheScaleCanHalve) {
  const BadStepPolicy policy(0);
  int64_t bad = 0;
  EXPECT_EQ(policy.judge(true, false, 65536, bad), Verdict::Overflow);
  EXPECT_EQ(bad, 0);
  // A non-finite loss is the model's, whatever the scale; at scale 1 the gradients overflow
  // by themselves.
  EXPECT_EQ(policy.judge(false, false, 65536, bad), Verdict::Stop);
  EXPECT_EQ(policy.judge(true, false, 1, bad), Verdict::Stop);
  const BadStepPolicy lenient(1);
  EXPECT_EQ(lenient.judge(true, false, 1, bad), Verdict::Skip);
  EXPECT_EQ(bad, 1);
}

}  // namespace
